"""Everything that calls llama.cpp or libggml: models, contexts, devices, RPC, memory."""
