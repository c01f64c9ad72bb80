// Runs an ONNX model in ONNX Runtime (npm onnxruntime-node, CPU) for ember's tests:
//   node onnx_run.js MODEL DIR
// DIR/inputs.json lists the inputs, [{"name", "dtype", "shape", "file"}], each file the raw
// little-endian elements. The outputs are written the same way: DIR/outputs.json (in the model's
// output order) and DIR/output_<i>.bin. Exit 1 with the runtime's message on stderr on failure.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const arrays = {
  float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array,
  uint8: Uint8Array, bool: Uint8Array,
};

async function main() {
  const [model, dir] = process.argv.slice(2);
  const specs = JSON.parse(fs.readFileSync(path.join(dir, 'inputs.json'), 'utf8'));
  const feeds = {};
  for (const s of specs) {
    const bytes = fs.readFileSync(path.join(dir, s.file));
    const Array_ = arrays[s.dtype];
    if (!Array_) throw new Error(`dtype ${s.dtype} is not supported by onnx_run.js`);
    const copy = new Uint8Array(bytes.length);  // aligned
    copy.set(bytes);
    feeds[s.name] = new ort.Tensor(s.dtype, new Array_(copy.buffer), s.shape);
  }
  const session = await ort.InferenceSession.create(model, {intraOpNumThreads: 1, interOpNumThreads: 1});
  const results = await session.run(feeds);
  const out = [];
  session.outputNames.forEach((name, i) => {
    const t = results[name];
    const file = `output_${i}.bin`;
    const data = t.data;
    fs.writeFileSync(path.join(dir, file), Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    out.push({name, dtype: t.type, shape: t.dims.map(Number), file});
  });
  fs.writeFileSync(path.join(dir, 'outputs.json'), JSON.stringify({inputs: session.inputNames, outputs: out}));
}

main().catch((e) => {
  console.error(e && e.message ? e.message : String(e));
  process.exit(1);
});
