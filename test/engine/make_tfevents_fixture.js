// Writes fixtures/protobufjs.tfevents: known TensorBoard Events encoded by a
// real protobuf implementation (protobufjs) from their .proto definitions and
// framed as TFRecords, for tensorboard_test.cpp to compare the engine's
// hand-written encoder against byte for byte. The tests read the committed
// file and never need node; rerun this only to change the Events (and then the
// matching list in tensorboard_test.cpp):
//   npm pack protobufjs && tar xzf protobufjs-*.tgz    # made with protobufjs 8.8.1
//   node test/engine/make_tfevents_fixture.js package/dist/protobuf.js \
//        test/engine/fixtures/protobufjs.tfevents
'use strict';
const fs = require('fs');
const path = require('path');

const [protobufjsPath, outPath] = process.argv.slice(2);
if (!protobufjsPath || !outPath) {
  console.error('usage: node make_tfevents_fixture.js PROTOBUFJS/dist/protobuf.js OUT.tfevents');
  process.exit(2);
}
const protobuf = require(path.resolve(protobufjsPath));

// The messages and fields an event file of scalars uses, with the names,
// types and numbers of tensorflow/tensorboard's tensorboard/compat/proto/
// event.proto and summary.proto (their other members left out).
const schema = `
syntax = "proto3";
package tensorboard;
message Summary {
  message Value {
    string node_name = 7;
    string tag = 1;
    oneof value {
      float simple_value = 2;
      bytes obsolete_old_style_histogram = 3;
    }
  }
  repeated Value value = 1;
}
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what {
    string file_version = 3;
    bytes graph_def = 4;
    Summary summary = 5;
  }
}
`;
const Event = protobuf.parse(schema, {keepCase: true}).root.lookupType('tensorboard.Event');

// Values exactly representable as float32, so the C++ side can state them as
// literals; steps and a long tag that take multi-byte varints; a 0.0 that a
// oneof must still write.
const longTag = 'moe/' + 'x'.repeat(140);
const events = [
  {wall_time: 1700000000.25, file_version: 'brain.Event:2'},
  {wall_time: 1700000001.5, step: 1, summary: {value: [
    {tag: 'lm loss', simple_value: 10.8125},
    {tag: 'learning-rate', simple_value: 3.0517578125e-05},
    {tag: 'grad-norm', simple_value: 4.59375},
    {tag: 'skipped', simple_value: 0},
    {tag: 'moe-dropped', simple_value: -2.5},
  ]}},
  {wall_time: 1700000002.75, step: 300, summary: {value: [
    {tag: 'lm loss validation', simple_value: 6.91162109375},
  ]}},
  {wall_time: 1700000003.125, step: 1099511627776, summary: {value: [{tag: longTag, simple_value: 2 ** 100}]}},
];

// CRC-32C bit by bit, and TFRecord's mask: ((crc >>> 15) | (crc << 17)) + 0xa282ead8.
function crc32c(bytes) {
  let crc = 0xFFFFFFFF;
  for (const b of bytes) {
    crc ^= b;
    for (let i = 0; i < 8; i++) crc = (crc & 1) ? (crc >>> 1) ^ 0x82F63B78 : crc >>> 1;
  }
  return (crc ^ 0xFFFFFFFF) >>> 0;
}
function masked(bytes) {
  const crc = crc32c(bytes);
  return ((((crc >>> 15) | (crc << 17)) >>> 0) + 0xa282ead8) >>> 0;
}
function u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; }

if (crc32c(Buffer.from('123456789')) !== 0xE3069283) throw new Error('crc32c is wrong');
const parts = [];
for (const e of events) {
  const err = Event.verify(e);
  if (err) throw new Error(err);
  const data = Buffer.from(Event.encode(Event.fromObject(e)).finish());
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(data.length));
  parts.push(len, u32(masked(len)), data, u32(masked(data)));
}
fs.writeFileSync(outPath, Buffer.concat(parts));
const pkg = path.resolve(path.dirname(protobufjsPath), '..', 'package.json');
const version = fs.existsSync(pkg) ? JSON.parse(fs.readFileSync(pkg, 'utf8')).version : '?';
console.log(`${outPath}: ${events.length} events, protobufjs ${version}`);
