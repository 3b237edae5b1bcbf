//! Memory time series (filled in by the time-series work).
