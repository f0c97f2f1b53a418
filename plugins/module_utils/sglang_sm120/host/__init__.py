"""What a host is: the facts the start gate reads, its GPUs, its CUDA toolkit, its disk and memory."""
