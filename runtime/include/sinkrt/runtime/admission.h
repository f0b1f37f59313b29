/// \file
/// Admission of connections that have not proven themselves yet, shared by
/// sinkd (device/src/daemon) and the rendezvous master (host/src/world).
///
/// A connection is *pending* from accept until its Hello (and, where there
/// is one, its proof of the token) passes. Pending connections have a short
/// deadline of their own and two quotas: per source address and in all. A
/// new connection over either quota closes the oldest pending connection of
/// its own address (over the total: of the address holding the most), so a
/// flood of silent or slow connections only ever crowds out its own sender,
/// and a real client, which speaks at once, gets in at any time.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sinkrt {

/// How many pending connections a listener holds.
struct PendingQuotas {
  int max_pending = 64;             ///< from all sources together
  int max_pending_per_address = 8;  ///< from one source address
};

/// A pending connection as the quotas see it.
struct PendingView {
  std::string_view source;  ///< its address without the port
  /// Bytes wait in its socket that the listener has not read yet: a client
  /// whose Hello came in a burst of dials, about to be served. Such a one is
  /// never evicted; a slow-loris is read as its bytes come, so it shows none.
  bool has_unread = false;
};

/// What a listener does with a new pending connection.
struct RoomVerdict {
  bool admit = true;            ///< false: refuse the newcomer (too many unread bursts)
  std::optional<size_t> evict;  ///< index into the pending list of the one to close first
  std::string why;              ///< why that one is closed: "3 connections from 127.0.0.1 have not finished ..."
};

/// Decides where a new connection from `source` goes, given the pending
/// ones in accept order (oldest first).
RoomVerdict MakeRoom(std::span<const PendingView> pending, std::string_view source, const PendingQuotas& quotas);

/// Bytes the kernel holds unread on socket `fd` (FIONREAD); 0 on error.
int UnreadBytes(int fd);

}  // namespace sinkrt
