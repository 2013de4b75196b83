"""ember for PyTorch users: `ember.torch.distributed` (PyTorch RPC's names)."""
