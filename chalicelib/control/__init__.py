"""Operators and tenants acting on campaigns: pause, resume, cancel, reschedule, retry-failed, the tenant API."""
