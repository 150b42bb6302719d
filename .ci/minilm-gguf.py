"""Writes sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) as a GGUF file that
llama.cpp's llama-server serves on /v1/embeddings (BERT architecture, mean pooling).

llama.cpp's own convert_hf_to_gguf.py needs PyTorch; this does the same mapping for
this one BERT model with numpy, safetensors and llama.cpp's `gguf` package: tensor names
through gguf's TensorNameMap, the WordPiece vocabulary in llama.cpp's "phantom space"
form, the special tokens from the model's tokenizer files.

Checked against sentence-transformers' published similarities for this model ("The
weather is lovely today." / "It's so sunny outside!" / "He drove to the stadium.":
0.6660, 0.1046, 0.1411); llama-server gives 0.6659, 0.1045, 0.1410. gguf prints "No
handler for special token type cls": llama.cpp takes [CLS] and [SEP] from the BERT
vocabulary's defaults.

Usage: python3 minilm-gguf.py MODEL_DIR OUT.gguf
"""

import json
import sys
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

model_dir, out = Path(sys.argv[1]), sys.argv[2]
hp = json.loads((model_dir / "config.json").read_text())
pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
assert pooling["pooling_mode_mean_tokens"], "only mean pooling is mapped"

w = gguf.GGUFWriter(out, "bert")
w.add_name("all-MiniLM-L6-v2")
w.add_context_length(hp["max_position_embeddings"])
w.add_embedding_length(hp["hidden_size"])
w.add_feed_forward_length(hp["intermediate_size"])
w.add_block_count(hp["num_hidden_layers"])
w.add_head_count(hp["num_attention_heads"])
w.add_layer_norm_eps(hp["layer_norm_eps"])
w.add_causal_attention(False)
w.add_pooling_type(gguf.PoolingType.MEAN)
w.add_file_type(gguf.LlamaFileType.ALL_F32)

# The vocabulary: [PAD], [CLS] and the like are control tokens; a "##" piece continues
# a word; any other piece starts one (llama.cpp marks that with U+2581).
vocab = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
tokens, types = [], []
for tok in vocab:
    if tok in special:
        tokens.append(tok)
        types.append(gguf.TokenType.CONTROL)
    else:
        tokens.append(tok[2:] if tok.startswith("##") else "\u2581" + tok)
        types.append(gguf.TokenType.NORMAL)
w.add_token_type_count(hp["type_vocab_size"])
w.add_tokenizer_model("bert")
w.add_tokenizer_pre("default")
w.add_token_list(tokens)
w.add_token_types(types)
gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(w)

names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, hp["num_hidden_layers"])
for name, data in load_file(str(model_dir / "model.safetensors")).items():
    if name in ("embeddings.position_ids",) or name.startswith("pooler."):
        continue
    mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
    if mapped is None:
        sys.exit(f"no GGUF name for tensor {name}")
    w.add_tensor(mapped, data.astype(np.float32))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
