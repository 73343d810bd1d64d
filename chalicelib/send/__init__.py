"""send_emails: one queue drained through SES at its rate, one drainer per queue."""
