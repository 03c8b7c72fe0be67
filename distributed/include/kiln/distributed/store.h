// A TCP key-value store for rendezvous (like c10d's TCPStore): a server hosted
// by the launcher (kilnrun) or by rank 0, and clients in every rank. Every call
// has a timeout; every client presents the job's token (KILN_STORE_TOKEN); a
// server started without a token accepts loopback clients only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"

namespace kiln::dist {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

/// Thrown by get() and wait() when the store answered that a key was still
/// missing at the timeout. Every other failure (the store unreachable or gone)
/// is a plain kiln::Error, so callers can tell "a rank did not come" from
/// "the store went away".
class StoreTimeout : public Error {
 public:
  using Error::Error;
};

/// The key-value interface the process groups use (implemented by the TCP client).
class Store {
 public:
  virtual ~Store() = default;
  /// Sets key to value (overwrites).
  virtual void set(const std::string& key, const Bytes& value) = 0;
  /// The value of key, waiting up to timeout() for it to be set (StoreTimeout).
  virtual Bytes get(const std::string& key) = 0;
  /// Adds delta to the integer stored at key (0 if absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Waits until every key is set; StoreTimeout naming the missing keys on timeout.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  /// Sets key to `desired` if its value equals `expected` (empty expected: key
  /// absent); returns the value after the call.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  /// Deletes key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;
  /// Number of keys stored.
  virtual int64_t num_keys() = 0;
  /// Timeout of get() and of every request round trip.
  virtual Millis timeout() const = 0;
  virtual void set_timeout(Millis t) = 0;
};

/// Server options.
struct TCPStoreServerOptions {
  std::string host = "0.0.0.0";  ///< address to bind
  uint16_t port = 0;             ///< 0: an ephemeral port (see port())
  std::string token;             ///< empty: only loopback clients are accepted
  /// A connection that has not sent its first (token) message by then is closed.
  Millis hello_timeout{10000};
  /// At most this many connections (and a quarter of the descriptor limit)
  /// may wait for their hello; a new one closes the oldest.
  int max_unauthenticated = 64;
};

/// The store server: a thread serving any number of clients. Malformed or
/// truncated requests are rejected and logged; the server keeps serving others.
class TCPStoreServer {
 public:
  explicit TCPStoreServer(TCPStoreServerOptions opts = {});
  ~TCPStoreServer();  ///< stops and joins the serving thread
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;
  /// The port it listens on.
  uint16_t port() const;
  /// Stops serving (idempotent).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Client options.
struct TCPStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;       ///< must match the server's
  Millis timeout{300000};  ///< connect (with retries), get and round trips
};

/// A store client over TCP (length-prefixed messages).
class TCPStore : public Store {
 public:
  /// Connects, retrying until opts.timeout; kiln::Error naming host:port on failure.
  explicit TCPStore(TCPStoreOptions opts);
  ~TCPStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  Millis timeout() const override;
  void set_timeout(Millis t) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A TCP port on 127.0.0.1 that nothing listens on now (the OS's choice for a
/// socket bound to port 0), for tests, benchmarks and one-host launches; another
/// process may take it before the caller binds it. kiln::Error if none is given.
uint16_t free_loopback_port();

}  // namespace kiln::dist
