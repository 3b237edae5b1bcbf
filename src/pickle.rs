//! Restricted pickle reader (filled in by the snapshot work).
