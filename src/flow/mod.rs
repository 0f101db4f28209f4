//! Deployed flows: config, validation, compilation into a Plan, node execution. (Being written.)
