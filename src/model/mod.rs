//! Model geometry and memory arithmetic (filled in by the memory-model work).
