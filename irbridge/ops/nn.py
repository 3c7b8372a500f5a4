"""Neural-network ops: matmul family, convolution, attention, norms, pooling, embedding, resize."""
