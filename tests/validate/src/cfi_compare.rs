//! Our STACK CFI against dump_syms's (placeholder, being written).
