//! The `usage` an answer reports, found while the answer streams through: a JSON body's
//! top-level `usage` (OpenAI chat and responses, Anthropic messages), or in a
//! `text/event-stream` each event's `usage`, `message.usage` (Anthropic's
//! `message_start`) or `response.usage` (OpenAI's `response.completed`); model servers'
//! own APIs' counts too: SGLang's `meta_info`, Ollama's and llama.cpp's root members
//! ([`native`]), also on each line of a stream of JSON lines. A lexer follows
//! only strings and nesting, skipping string contents with `memchr`; the one object it
//! keeps is a `usage` value (at most 4 KiB), parsed when it closes. The answer itself is
//! never held.
//!
//! Text the model wrote is inside JSON strings, so it can never read as a member: a
//! prompt cannot make the gateway see a usage of its choosing. A member name written
//! with escapes (`"usag\u0065"`) is not recognised; no encoder writes ASCII that way.

use arrayvec::ArrayVec;

/// Largest `usage` object kept for parsing.
const MAX_USAGE_BYTES: usize = 4096;
/// Longest member name compared (`prompt_eval_count` is the longest wanted).
const MAX_NAME: usize = 17;
/// Nesting tracked; what is deeper only counts levels.
const TRACKED: usize = 3;

/// Finds the usage of one answer as its bytes go by ([`feed`](Self::feed)); several
/// usage reports (a stream's events) merge pessimistically: the largest input (with its
/// cached part) and the largest output.
#[derive(Debug)]
pub struct UsageScanner {
    lexer: Lexer,
    /// Server-sent events: where the current line is.
    sse: Option<Line>,
    /// At an event's start (the stream's, or after the blank line that ended one).
    between_events: bool,
    reported: Reported,
}

impl UsageScanner {
    /// A scanner for an answer of `content_type`: events for `text/event-stream`, one
    /// JSON document otherwise.
    pub fn new(content_type: Option<&[u8]>) -> Self {
        let sse = content_type.is_some_and(|ct| {
            let essence = ct.split(|&b| b == b';').next().unwrap_or_default();
            essence
                .trim_ascii()
                .eq_ignore_ascii_case(b"text/event-stream")
        });
        Self {
            lexer: Lexer::default(),
            sse: sse.then_some(Line::Start),
            between_events: true,
            reported: Reported::default(),
        }
    }

    /// The usage reported so far; `None` when none was.
    pub fn usage(&self) -> Option<Usage> {
        self.reported.total()
    }

    /// Reads the next bytes of the answer.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        if self.sse.is_none() {
            self.lexer.feed(chunk, &mut self.reported);
            return;
        }
        while !chunk.is_empty() {
            if self.between_events && matches!(self.sse, Some(Line::Start)) {
                if let Some(rest) = skip_event(chunk) {
                    chunk = rest;
                    continue;
                }
            }
            let (segment, ended) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (&chunk[..i], Some(&chunk[i + 1..])),
                None => (chunk, None),
            };
            self.segment(segment);
            match ended {
                Some(rest) => {
                    self.end_line();
                    chunk = rest;
                }
                None => break,
            }
        }
    }

    /// Part of an event-stream line (no line break in it).
    fn segment(&mut self, mut bytes: &[u8]) {
        while let (Some(line), Some(&b)) = (self.sse.as_mut(), bytes.first()) {
            match line {
                Line::Data { skip_space } => {
                    if *skip_space && b == b' ' {
                        bytes = &bytes[1..];
                    }
                    *skip_space = false;
                    self.lexer.feed(bytes, &mut self.reported);
                    return;
                }
                Line::Other => return,
                Line::Start if b == b'\r' => bytes = &bytes[1..],
                Line::Start => *line = Line::Field(ArrayVec::new()),
                Line::Field(name) => {
                    bytes = &bytes[1..];
                    if b == b':' {
                        *line = if name.as_slice() == b"data" {
                            Line::Data { skip_space: true }
                        } else {
                            Line::Other
                        };
                    } else if name.try_push(b).is_err() || !b"data".starts_with(name) {
                        *line = Line::Other;
                    }
                }
            }
        }
    }

    fn end_line(&mut self) {
        let ended = self.sse.replace(Line::Start);
        self.between_events = matches!(ended, Some(Line::Start));
        match ended {
            // A blank line ends the event: an event that broke off takes nothing along.
            Some(Line::Start) => self.lexer = Lexer::default(),
            // An event's data lines are joined by a line break, which JSON reads as space.
            Some(Line::Data { .. }) => self.lexer.feed(b"\n", &mut self.reported),
            _ => {}
        }
    }
}

/// At an event's start: the bytes after the event when all of it is in `chunk` and it
/// never writes `usage`, `meta_info` nor `tokens_` (so it cannot report one, and is not
/// lexed: most of a stream's events are text deltas), else `None`. The lexer's 2.6 ns a
/// byte becomes a `memchr` walk of the lines and a `memmem` search a name. What an event reports does not depend on
/// how the stream was cut into chunks: a cut event is lexed as before.
fn skip_event(chunk: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    let end = loop {
        let newline = at + memchr::memchr(b'\n', &chunk[at..])?;
        let line = &chunk[at..newline];
        if line.is_empty() || line == b"\r" {
            if at == 0 {
                return None; // a blank line before any event: the usual path reads it
            }
            break newline + 1;
        }
        at = newline + 1;
    };
    let event = &chunk[..end];
    let may_report = REPORTING_NAMES
        .iter()
        .any(|name| name.find(event).is_some());
    (!may_report).then(|| &chunk[end..])
}

/// What an event that may report a usage writes: `usage` (and `usageMetadata`),
/// llama.cpp's `tokens_…` counts, SGLang's `meta_info`. Searchers built once: building
/// one per search cost as much as the search of a short event.
static REPORTING_NAMES: std::sync::LazyLock<[memchr::memmem::Finder<'static>; 3]> =
    std::sync::LazyLock::new(|| {
        [b"usage".as_slice(), b"tokens_", b"meta_info"].map(memchr::memmem::Finder::new)
    });

/// Where an event-stream line is.
#[derive(Debug)]
enum Line {
    Start,
    /// Reading a field name (at most `data`).
    Field(ArrayVec<u8, 4>),
    Data {
        skip_space: bool,
    },
    Other,
}

/// What the member whose value comes next is to the scanner.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Member {
    #[default]
    None,
    /// `usage`, where a usage is reported.
    Usage,
    /// `message` or `response` of the root: an object whose `usage` counts too.
    Holder,
    /// A root member holding a token count (a model server's own API).
    Count(Count),
    /// SGLang's `meta_info`: an object whose counts are read as a root's are (it may
    /// hold logprobs far past what a kept `usage` may be).
    Counts,
}

#[derive(Debug, Default)]
struct Lexer {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Whether each tracked level (1..=TRACKED) is an object, and a usage holder.
    object: [bool; TRACKED + 1],
    holder: [bool; TRACKED + 1],
    /// Whether each tracked level is an object whose counts are read (`meta_info`).
    counts_in: [bool; TRACKED + 1],
    /// The next string at this level is a member name.
    expect_name: bool,
    /// A member name being read (levels 1 and 2 only), and whether it fit.
    name: Option<ArrayVec<u8, MAX_NAME>>,
    name_fits: bool,
    /// The last name read, waiting for its `:`.
    named: Member,
    member: Member,
    /// A `usage` object being kept: the level it opened at, and its bytes so far.
    kept: Option<(usize, Vec<u8>)>,
    /// A root member's token count being read, and the counts the root wrote so far.
    digits: Option<Digits>,
    counts: Counts,
}

impl Lexer {
    fn feed(&mut self, mut bytes: &[u8], reported: &mut Reported) {
        while !bytes.is_empty() {
            if self.in_string {
                bytes = self.string(bytes);
                continue;
            }
            let b = bytes[0];
            bytes = &bytes[1..];
            self.keep(&[b]);
            if let Some(digits) = &mut self.digits {
                match digits.push(b) {
                    Step::More => continue,
                    Step::Done(count) => {
                        self.digits = None;
                        if let Some((count, value)) = count {
                            self.counts.set(count, value);
                        }
                    }
                }
            }
            self.structural(b, reported);
        }
    }

    /// Inside a string: skips to its next quote or backslash; the rest after it.
    fn string<'b>(&mut self, bytes: &'b [u8]) -> &'b [u8] {
        if self.escaped {
            self.escaped = false;
            self.keep(&bytes[..1]);
            self.name_byte(bytes[0]);
            return &bytes[1..];
        }
        let Some(i) = memchr::memchr2(b'"', b'\\', bytes) else {
            self.keep(bytes);
            for &b in bytes {
                self.name_byte(b);
            }
            return &[];
        };
        self.keep(&bytes[..=i]);
        for &b in &bytes[..i] {
            self.name_byte(b);
        }
        if bytes[i] == b'\\' {
            self.escaped = true;
            self.name_byte(b'\\');
        } else {
            self.in_string = false;
            if let Some(name) = self.name.take() {
                self.named = self.classify(&name);
            }
        }
        &bytes[i + 1..]
    }

    fn name_byte(&mut self, b: u8) {
        if let Some(name) = &mut self.name {
            if name.try_push(b).is_err() {
                self.name_fits = false;
            }
        }
    }

    /// What a member name read at this level is to the scanner.
    fn classify(&self, name: &[u8]) -> Member {
        if !self.name_fits {
            return Member::None;
        }
        match (self.depth, name) {
            (1, b"usage" | b"usageMetadata") => Member::Usage,
            (1, b"message" | b"response") => Member::Holder,
            // SGLang's `/generate`: its counts under a chat usage's names.
            (1, b"meta_info") => Member::Counts,
            (1, name) => Count::named(name).map_or(Member::None, Member::Count),
            (2, name) if self.counts_in[2] => {
                Count::in_meta_info(name).map_or(Member::None, Member::Count)
            }
            (2, b"usage") if self.holder[2] => Member::Usage,
            // Gemini's `streamGenerateContent` without `alt=sse`: a JSON array of the
            // stream's responses, each with its `usageMetadata`.
            (2, b"usageMetadata") if !self.object[1] => Member::Usage,
            _ => Member::None,
        }
    }

    fn structural(&mut self, b: u8, reported: &mut Reported) {
        match b {
            b'"' => {
                self.in_string = true;
                if self.expect_name && (self.depth == 1 || self.depth == 2) {
                    self.name = Some(ArrayVec::new());
                    self.name_fits = true;
                }
                self.expect_name = false;
            }
            b':' => {
                self.member = std::mem::take(&mut self.named);
                if let Member::Count(count) = self.member {
                    self.digits = Some(Digits::of(count));
                }
            }
            b'{' | b'[' => {
                let object = b == b'{';
                if object && self.member == Member::Usage && self.kept.is_none() {
                    self.kept = Some((self.depth, vec![b'{']));
                }
                let holder = object && self.member == Member::Holder;
                let counts_in = object && self.member == Member::Counts;
                self.depth = self.depth.saturating_add(1);
                if self.depth <= TRACKED {
                    self.object[self.depth] = object;
                    self.holder[self.depth] = holder;
                    self.counts_in[self.depth] = counts_in;
                }
                self.expect_name = object;
                self.member = Member::None;
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.kept.as_ref().is_some_and(|(at, _)| *at == self.depth) {
                    if let Some((_, bytes)) = self.kept.take() {
                        merge(&mut reported.usage, parse(&bytes));
                    }
                }
                if self.depth == 0 {
                    if let Some(counted) = self.counts.take() {
                        reported.counted(counted);
                    }
                }
                self.expect_name = false;
                self.member = Member::None;
            }
            b',' => {
                self.expect_name = self.depth <= TRACKED && self.object[self.depth];
                self.member = Member::None;
            }
            _ => {}
        }
    }

    /// Adds bytes to a kept `usage` object; one too large is dropped.
    fn keep(&mut self, bytes: &[u8]) {
        if let Some((_, kept)) = &mut self.kept {
            if kept.len() + bytes.len() > MAX_USAGE_BYTES {
                self.kept = None;
            } else {
                kept.extend_from_slice(bytes);
            }
        }
    }
}

mod native;
mod shapes;
use native::{Count, Counts, Digits, Reported, Step};
pub use shapes::Usage;
use shapes::{merge, parse};

#[cfg(test)]
mod tests;
