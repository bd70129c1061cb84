"""The framework-free MLP job (the demo): its runner."""
