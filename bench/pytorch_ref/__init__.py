"""PyTorch reference models for bench/compare_pytorch: sinkrt's initialisers,
shuffle order and data in numpy, the same networks in PyTorch, and the
harness that runs both frameworks side by side."""
