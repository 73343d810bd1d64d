"""Each port's behaviour, written once and run against its in-memory fake and against the real store on the
local stack (moto): a fake that drifts from its store fails here, and mypy fails where the fixture types it."""
