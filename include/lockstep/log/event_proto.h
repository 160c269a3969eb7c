#pragma once

#include <cstdint>
#include <string>

namespace lockstep::log {

/*
 * TensorBoard's Event protos, encoded by hand (no libprotobuf: these few fields are all lockstep writes).
 * The fields, from tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto:
 *
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 *
 * Protobuf's wire format: each field is a key varint (field_number << 3 | wire_type) then its value, by
 * wire type: 0 varint (int64: two's complement, so a negative step takes 10 bytes), 1 fixed64 (double:
 * 8 bytes little-endian), 2 length-delimited (string, nested message: a varint byte count then the
 * bytes), 5 fixed32 (float: 4 bytes little-endian). A varint is 7 bits a byte, least significant group
 * first, the high bit set on every byte but the last.
 */

/// TensorBoard's version marker, the first event of every event file.
constexpr const char* kEventFileVersion = "brain.Event:2";

/// Event { wall_time, file_version: kEventFileVersion }. `wall_time` in seconds since the Unix epoch.
std::string encode_file_version_event(double wall_time);

/// Event { wall_time, step, summary { value { tag, simple_value: value } } }: one scalar, as
/// SummaryWriter.add_scalar writes it. `wall_time` in seconds since the Unix epoch.
std::string encode_scalar_event(const std::string& tag, float value, std::int64_t step, double wall_time);

}  // namespace lockstep::log
