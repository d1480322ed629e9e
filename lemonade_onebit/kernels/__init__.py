"""Model-file transforms the executors need: `1bit convert`.

- `plan`: what the Hadamard rotation does to each tensor of a llama / qwen2 / qwen3 model;
- `hadamard`: the Hadamard matrices and rotations; `compute`: their arithmetic on numpy or torch,
  bit for bit the same;
- `ternary`: TQ1_0 / TQ2_0 blocks as Q4_0;
- `gguffile`: streaming GGUF in and atomic GGUF out; `tools`: llama-quantize and llama-imatrix;
- `convert`: the three conversions; `commands`: the `1bit convert` command line.
"""
