"""Putting email on a tenant's queue: the queue and its alarm created on first use, batches sent with retries."""
