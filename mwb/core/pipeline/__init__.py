"""Pipeline parallelism: schedule orders (1F1B, interleaved, GPipe), the executor, point-to-point exchange
and the memory/bubble measurement."""
