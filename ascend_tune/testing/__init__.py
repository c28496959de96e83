"""What tests here and downstream share: the fake torch_npu and tiny models."""
