// Runs a model exported by `mnist --export-onnx` (or `resnet --export-onnx`) in ONNX Runtime
// and measures its accuracy on a test split, with no ember in the loop:
//
//   build/bin/mnist --model cnn --export-onnx runs/mnist/cnn.onnx
//   bash scripts/fetch_data.sh onnxruntime      # npm's onnxruntime-node, into data/onnxruntime/
//   NODE_PATH=data/onnxruntime/node_modules node examples/onnx/mnist_onnxruntime.js runs/mnist/cnn.onnx data/mnist
//
// An optional third argument scores only the first N test images (resnet --limit N does).
//
// The model takes `image` [batch, 1, 28, 28] float32 pixels in [0, 1] and returns `logits`
// [batch, 10]. The last line is `result: {"test_accuracy": ..., "test_loss": ..., "images": ...}`
// (test_loss: the mean cross-entropy, as the programs report it).
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

// An IDX file (big-endian header, then bytes), gunzipped when it ends in .gz.
function readIdx(file) {
  let bytes = fs.readFileSync(file);
  if (file.endsWith('.gz')) bytes = require('zlib').gunzipSync(bytes);
  const dims = bytes[3];
  const shape = [];
  for (let i = 0; i < dims; ++i) shape.push(bytes.readUInt32BE(4 + 4 * i));
  return {shape, data: bytes.subarray(4 + 4 * dims)};
}

function find(dir, name) {
  for (const f of [name, name + '.gz']) if (fs.existsSync(path.join(dir, f))) return path.join(dir, f);
  throw new Error(`${dir} has no ${name}`);
}

async function main() {
  const [model, dir, limit] = process.argv.slice(2);
  if (!model || !dir) throw new Error('usage: node mnist_onnxruntime.js MODEL.onnx DATA_DIR [N]');
  const images = readIdx(find(dir, 't10k-images-idx3-ubyte'));
  const labels = readIdx(find(dir, 't10k-labels-idx1-ubyte'));
  const [all, rows, cols] = images.shape;
  const n = limit ? Math.min(all, Number(limit)) : all;
  const session = await ort.InferenceSession.create(model);
  let correct = 0, lossSum = 0;
  const batch = 500;
  for (let start = 0; start < n; start += batch) {
    const count = Math.min(batch, n - start);
    const pixels = new Float32Array(count * rows * cols);
    for (let i = 0; i < pixels.length; ++i) pixels[i] = images.data[start * rows * cols + i] / 255;
    const {logits} = await session.run({image: new ort.Tensor('float32', pixels, [count, 1, rows, cols])});
    const classes = logits.dims[1];
    for (let i = 0; i < count; ++i) {
      const row = logits.data.subarray(i * classes, (i + 1) * classes);
      let best = 0;
      for (let k = 1; k < classes; ++k) if (row[k] > row[best]) best = k;
      const label = labels.data[start + i];
      if (best === label) ++correct;
      let sum = 0;  // -log softmax(row)[label], in float64
      for (let k = 0; k < classes; ++k) sum += Math.exp(row[k] - row[best]);
      lossSum += Math.log(sum) - (row[label] - row[best]);
    }
  }
  console.log(`ONNX Runtime ${require('onnxruntime-node/package.json').version}: ${correct} of ${n} test images right ` +
              `(${(100 * correct / n).toFixed(2)}%)`);
  console.log(`result: {"test_accuracy": ${correct / n}, "test_loss": ${lossSum / n}, "images": ${n}}`);
}

main().catch((e) => {
  console.error(`mnist_onnxruntime: ${e.message}`);
  process.exit(1);
});
