"""moonsend's own producer: recipients uploaded and read, a campaign composed, previewed and published to
PrecompileEmail from them, as a tenant's own code would publish it."""
