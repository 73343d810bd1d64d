"""The tenant console: sessions for the people who sign in, and its pages (rendered on the server)."""
