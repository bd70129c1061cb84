"""What every layer shares: durable writes, locks, the error types."""
