// A dlopen'd module with 32 bytes of thread-local storage: each thread that
// touches it gets a malloc'd dynamic TLS block (see CMakeLists.txt).
extern "C" {
thread_local char kiln_tls_block[32];

/// The calling thread's block (its address is the block's start).
char* kiln_tls_block_of_this_thread() {
  return kiln_tls_block;
}
}
