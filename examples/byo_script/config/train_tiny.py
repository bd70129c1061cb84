# A tiny run of nano_train.py for a CPU: a naive start (one row per micro-batch).
batch_size = 1
gradient_accumulation_steps = 8
block_size = 128
max_iters = 400
