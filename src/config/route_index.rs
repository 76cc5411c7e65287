//! Finding a request's route among thousands: a byte trie of the routes' paths, walked
//! once along the request's path. Routes are kept in match order (longest path first),
//! so the deepest path that is a prefix of the request's and has a route accepting it
//! (host, methods) holds the winner: the first route of match order that matches, as a
//! scan would find it. Few routes are scanned instead: a scan of a short list costs less
//! than a walk.

/// Up to this many routes, a scan.
const SCAN_UP_TO: usize = 32;

#[derive(Debug, Default)]
struct Node {
    /// By byte, sorted.
    children: Vec<(u8, u32)>,
    /// The routes whose path ends here, in match order.
    routes: Vec<u32>,
}

/// The index of one config's routes.
#[derive(Debug, Default)]
pub struct RouteIndex {
    /// Empty when the routes are few enough to scan.
    nodes: Vec<Node>,
    /// Each route's path, in match order.
    paths: Vec<String>,
}

impl RouteIndex {
    /// The index of routes with `paths`, given in match order.
    pub fn new<'a>(paths: impl IntoIterator<Item = &'a str>) -> Self {
        let paths: Vec<String> = paths.into_iter().map(str::to_owned).collect();
        let mut index = Self {
            nodes: Vec::new(),
            paths,
        };
        if index.paths.len() > SCAN_UP_TO {
            index.nodes.push(Node::default());
            for i in 0..index.paths.len() {
                index.insert(i);
            }
        }
        index
    }

    fn insert(&mut self, route: usize) {
        let mut at = 0usize;
        for &b in self.paths[route].as_bytes() {
            let children = &self.nodes[at].children;
            at = match children.binary_search_by_key(&b, |&(c, _)| c) {
                Ok(k) => children[k].1 as usize,
                Err(k) => {
                    let next = self.nodes.len();
                    self.nodes.push(Node::default());
                    self.nodes[at].children.insert(k, (b, next as u32));
                    next
                }
            };
        }
        self.nodes[at].routes.push(route as u32);
    }

    /// The first route in match order whose path `path` starts with and that `accepts`
    /// the request (its host and method).
    #[inline]
    pub fn find(&self, path: &str, accepts: impl Fn(usize) -> bool) -> Option<usize> {
        if self.nodes.is_empty() {
            return self
                .paths
                .iter()
                .enumerate()
                .position(|(i, p)| path.starts_with(p.as_str()) && accepts(i));
        }
        // The nodes along the path that end a route's path, shallowest first.
        let mut ends: smallvec::SmallVec<[u32; 8]> = smallvec::SmallVec::new();
        let mut at = 0usize;
        if !self.nodes[0].routes.is_empty() {
            ends.push(0);
        }
        for &b in path.as_bytes() {
            let children = &self.nodes[at].children;
            match children.binary_search_by_key(&b, |&(c, _)| c) {
                Ok(k) => at = children[k].1 as usize,
                Err(_) => break,
            }
            if !self.nodes[at].routes.is_empty() {
                ends.push(at as u32);
            }
        }
        ends.iter().rev().find_map(|&node| {
            self.nodes[node as usize]
                .routes
                .iter()
                .map(|&r| r as usize)
                .find(|&r| accepts(r))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the index must answer: the first route of match order that matches.
    fn scan(paths: &[String], path: &str, accepts: &[bool]) -> Option<usize> {
        (0..paths.len()).find(|&i| path.starts_with(paths[i].as_str()) && accepts[i])
    }

    proptest! {
        #[test]
        fn the_walk_finds_what_a_scan_finds(
            mut paths in proptest::collection::vec("/[ab/]{0,5}", 33..200),
            accepts in proptest::collection::vec(any::<bool>(), 200),
            requests in proptest::collection::vec("/[ab/c]{0,7}", 1..50),
        ) {
            // Match order: the longest path first (ties in any order).
            paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
            let index = RouteIndex::new(paths.iter().map(String::as_str));
            prop_assert!(!index.nodes.is_empty(), "more routes than a scan takes");
            for path in &requests {
                prop_assert_eq!(
                    index.find(path, |i| accepts[i]),
                    scan(&paths, path, &accepts),
                    "{}", path
                );
            }
        }
    }

    #[test]
    fn few_routes_are_scanned() {
        let index = RouteIndex::new(["/v1/search", "/v1/", "/"]);
        assert!(index.nodes.is_empty());
        assert_eq!(index.find("/v1/searchable", |_| true), Some(0));
        assert_eq!(index.find("/v1/searchable", |i| i != 0), Some(1));
        assert_eq!(index.find("/other", |_| true), Some(2));
        assert_eq!(index.find("/other", |_| false), None);
    }
}
