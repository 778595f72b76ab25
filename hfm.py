import transformers
def gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg)
