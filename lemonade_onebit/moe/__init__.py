"""Mixture-of-experts models bigger than the GPU: the expert index of a GGUF (`inspect`), where
llama-server should keep which experts (`plan`, applied by `1bit serve` on GPU routes), routing
traces from llama.cpp (`trace`) and what an expert cache would hit on them (`simulate`)."""
