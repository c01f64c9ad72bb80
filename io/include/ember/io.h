// ember::io: safetensors files, atomic training checkpoints, Hugging Face GPT-2 folders, ONNX export,
// PNG images (save_image, make_grid).
#pragma once

#include "ember/io/checkpoint.h"
#include "ember/io/image.h"
#include "ember/io/onnx.h"
#include "ember/io/pretrained.h"
#include "ember/io/safetensors.h"
