#pragma once

#include <string>

namespace lockstep::comm {

/// The address of this host's interface that routes to `host` (a name or an IPv4/IPv6 address):
/// "127.0.0.1" for a local master, the LAN address for a remote one. Found by connecting a UDP
/// socket (no packet is sent) and reading its local address. Throws std::runtime_error naming the
/// host when it does not resolve or no route reaches it.
std::string local_address_for(const std::string& host);

/// True for 127.0.0.0/8 and ::1.
bool is_loopback_address(const std::string& address);

/// The IPv4 address of the first interface that is up and not loopback, or "" when there is none.
std::string first_non_loopback_address();

/// True when `port` can be bound on all interfaces right now (TCP, SO_REUSEADDR as the rendezvous store
/// uses).
bool port_is_free(int port);

}  // namespace lockstep::comm
