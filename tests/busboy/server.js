// A busboy upstream for tests/integration/busboy.rs (busboy is what Express's multer and
// Fastify read multipart bodies with): answers every POST with the text fields busboy
// read, name to values, as JSON.
//
//     node tests/busboy/server.js PORT     (busboy from tests/busboy/node_modules)

'use strict';

const http = require('http');
const busboy = require('busboy');

http
  .createServer((req, res) => {
    const fields = {};
    const answer = (status, body) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    let parser;
    try {
      parser = busboy({ headers: req.headers });
    } catch (e) {
      answer(400, { error: String(e) });
      return;
    }
    parser.on('field', (name, value) => {
      (fields[name] = fields[name] || []).push(value);
    });
    parser.on('file', (_name, stream) => stream.resume());
    parser.on('close', () => answer(200, fields));
    parser.on('error', (e) => answer(400, { error: String(e) }));
    req.pipe(parser);
  })
  .listen(Number(process.argv[2]), '127.0.0.1');
