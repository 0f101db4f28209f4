//! The storage sink: the local event history. (Being written.)
