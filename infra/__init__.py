"""What Chalice does not create: the template Chalice merges, deployment, the local stack, and the moonsend CLI."""
