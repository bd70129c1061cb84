# A tiny run of nano_train.py for a CPU: a naive start (one row per micro-batch), GPT-2 dropout.
batch_size = 1
gradient_accumulation_steps = 8
block_size = 64
n_embd = 64
max_iters = 400
dropout = 0.1
