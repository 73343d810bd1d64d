"""What comes back: SES's events, the reputation guard, unsubscribes, tenants' reports."""
