//! The event history of the storage sink: `events.db`. (Being written.)
