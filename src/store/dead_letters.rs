//! The pipeline dead-letter queue and the webhook inbox: `dead_letters.db`. (Being written.)
