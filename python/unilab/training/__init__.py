"""The original's training modules: :mod:`.soak` and :mod:`.cuda_mps_cli`."""
