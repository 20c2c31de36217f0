#include "traces/importers/nsys/nsys_importer.h"

#include <algorithm>
#include <array>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <initializer_list>
#include <unordered_map>
#include <vector>

#include "sim/inputs/input_error.h"
#include "traces/cuda_api.h"
#include "traces/importers/nsys/sqlite_database.h"
#include "traces/importers/trace_builder.h"

namespace hookstream {

namespace {

// CUPTI writes 0xFFFFFFFF into streamId / eventId when the field does not apply (a context sync
// has neither).
constexpr int64_t kNotApplicable = 4294967295LL;

// globalTid / globalPid pack the process id into bits 24..47 (trace-formats.md).
int64_t process_of(int64_t global_id) { return (global_id >> 24) & 0xFFFFFF; }

// nsys numbering (ENUM_CUDA_MEM_KIND), not CUPTI's: 0 Pageable, 1 Pinned, 2 Device, 3 Array,
// 4 Managed, 5 Device Static, 6 Managed Static, 7 Unknown.
MemoryKind memory_kind(int64_t nsys_kind) {
  switch (nsys_kind) {
    case 0: return MemoryKind::PageableHost;
    case 1: return MemoryKind::PinnedHost;
    case 2: case 3: case 5: return MemoryKind::Device;
    case 4: case 6: return MemoryKind::Managed;
    default: return MemoryKind::Unknown;
  }
}

// ENUM_CUDA_MEMCPY_OPER: 1 HtoD, 2 DtoH, 3 HtoA, 4 AtoH, 5 AtoA, 6 AtoD, 7 DtoA, 8 DtoD, 9 HtoH,
// 10 PtoP, 11..13 unified-memory migrations.
CopyKind copy_kind(int64_t kind) {
  switch (kind) {
    case 1: case 3: case 11: return CopyKind::HostToDevice;
    case 2: case 4: case 12: return CopyKind::DeviceToHost;
    case 5: case 6: case 7: case 8: case 13: return CopyKind::DeviceToDevice;
    case 10: return CopyKind::PeerToPeer;
    default: return CopyKind::Unknown;
  }
}

// syncType (ENUM_CUPTI_SYNC_TYPE) is used only when the API call that made a record is missing
// from the trace: on the traces we checked it does not reliably match that call (README traps).
ApiRole role_from_sync_type(int64_t sync_type) {
  switch (sync_type) {
    case 1: return ApiRole::EventSync;
    case 2: return ApiRole::StreamWait;
    case 3: return ApiRole::StreamSync;
    case 4: return ApiRole::DeviceSync;
    default: return ApiRole::Other;
  }
}

// A column by name, or -1 when this schema version lacks it, so one SELECT serves all versions.
class ColumnList {
 public:
  ColumnList(const SqliteDatabase& db, const std::string& table) : table_(table), present_(db.columns(table)) {}
  // Adds `name` to the select list if present; returns its position or -1.
  int want(const std::string& name) {
    if (!present_.count(name)) return -1;
    names_.push_back(name);
    return static_cast<int>(names_.size()) - 1;
  }
  std::string select() const {
    std::string sql = "SELECT ";
    for (size_t i = 0; i < names_.size(); ++i) sql += (i ? ", " : "") + names_[i];
    return sql + " FROM " + table_;
  }
  const std::string& table() const { return table_; }
  bool empty() const { return names_.empty(); }
  int64_t size() const { return static_cast<int64_t>(names_.size()); }

 private:
  std::string table_;
  std::set<std::string> present_;
  std::vector<std::string> names_;
};

// The columns read from one GPU activity table (those every such table shares, and `extra` in
// the order asked for, -1 where this schema lacks one), chosen from the schema. An absent table
// has no columns (SqliteDatabase::columns), so every position is -1 and it is not usable.
struct GpuColumns {
  std::string table;
  ColumnList columns;
  int start, end, device, context, stream, correlation, pid;
  std::vector<int> extra;
  GpuColumns(const SqliteDatabase& db, const std::string& table, std::initializer_list<const char*> wanted)
      : table(table), columns(db, table), start(columns.want("start")), end(columns.want("end")),
        device(columns.want("deviceId")), context(columns.want("contextId")), stream(columns.want("streamId")),
        correlation(columns.want("correlationId")), pid(columns.want("globalPid")) {
    for (const char* name : wanted) extra.push_back(columns.want(name));
  }
  bool usable() const { return start >= 0 && end >= 0 && stream >= 0; }
};

// The columns read from each GPU activity table (kernels, copies, memsets, CUDA event records,
// synchronization records), chosen in one place for the importer and for
// nsys_activity_queries.
struct GpuTables {
  GpuColumns kernels, copies, memsets, event_records, syncs;
  explicit GpuTables(const SqliteDatabase& db)
      : kernels(db, "CUPTI_ACTIVITY_KIND_KERNEL", {"demangledName", "shortName"}),
        copies(db, "CUPTI_ACTIVITY_KIND_MEMCPY", {"bytes", "copyKind", "srcKind", "dstKind"}),
        memsets(db, "CUPTI_ACTIVITY_KIND_MEMSET", {"bytes", "memKind"}),
        event_records(db, "CUPTI_ACTIVITY_KIND_CUDA_EVENT", {"eventId"}),
        syncs(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {"eventId", "syncType"}) {}
  // In the order they are read.
  std::array<const GpuColumns*, 5> all() const { return {&kernels, &copies, &memsets, &event_records, &syncs}; }
  // Which tables have the columns their reader needs (absent tables and columns are not errors).
  std::array<bool, 5> use() const {
    return {kernels.usable(), copies.usable(), memsets.usable(), event_records.stream >= 0 && event_records.extra[0] >= 0,
            syncs.start >= 0 && syncs.end >= 0};
  }
};

// The columns of CUPTI_ACTIVITY_KIND_RUNTIME: one host op per runtime/driver call. eventClass
// says what a row is (absent in exports that predate it: every row is then a call).
struct RuntimeColumns {
  ColumnList columns;
  int start, end, tid, correlation, name, event_class;
  explicit RuntimeColumns(const SqliteDatabase& db)
      : columns(db, "CUPTI_ACTIVITY_KIND_RUNTIME"), start(columns.want("start")), end(columns.want("end")), tid(columns.want("globalTid")),
        correlation(columns.want("correlationId")), name(columns.want("nameId")), event_class(columns.want("eventClass")) {}
  bool usable() const { return start >= 0 && correlation >= 0 && name >= 0; }
};

// The columns of NVTX_EVENTS: ranges and marks.
struct NvtxColumns {
  ColumnList columns;
  int start, end, type, text, text_id, tid;
  explicit NvtxColumns(const SqliteDatabase& db)
      : columns(db, "NVTX_EVENTS"), start(columns.want("start")),
        end(columns.want("end")), type(columns.want("eventType")), text(columns.want("text")),
        text_id(columns.want("textId")), tid(columns.want("globalTid")) {}
  bool usable() const { return start >= 0 && type >= 0; }
};

constexpr const char* kStringsQuery = "SELECT id, value FROM StringIds";

// ENUM_NSYS_EVENT_CLASS (Nsight Systems documentation, "SQLite Schema Event Values", CUDA Event
// Class Values; the same numbers in every export that has the table, and exports of 2022 that lack
// it use them too): the runtime table holds CUDA runtime (0), driver (1) and EGL driver (13) calls,
// and, when call stacks were collected (--cudabacktrace), one TRACE_PROCESS_EVENT_CUDABACKTRACE
// (67) row per call that had its stack taken, repeating that call's interval and correlationId
// with the stack in callchainId. Those rows are not calls: a 2022 export whose runtime table held
// one for each of 15 synchronous cudaMemcpy calls was read as 30 calls and twice the blocked time.
// Only the call classes become host ops; every other row is counted by its class.
bool is_call_class(int64_t event_class) { return event_class == 0 || event_class == 1 || event_class == 13; }

// What a row of another class is, for the report: the export's own name where it has
// ENUM_NSYS_EVENT_CLASS, else the documented name of the classes seen in runtime tables.
std::string event_class_label(int64_t event_class, const std::map<int64_t, std::string>& names) {
  std::string label;
  const auto named = names.find(event_class);
  if (named != names.end()) {
    label = named->second;
  } else {
    switch (event_class) {
      case 67: label = "TRACE_PROCESS_EVENT_CUDABACKTRACE"; break;
      case 68: label = "TRACE_PROCESS_EVENT_CUDABACKTRACE_START"; break;
      case 69: label = "TRACE_PROCESS_EVENT_CUDABACKTRACE_FINISH"; break;
      case 28: label = "TRACE_PROCESS_EVENT_CUDNN"; break;
      case 29: label = "TRACE_PROCESS_EVENT_CUBLAS"; break;
      case 77: label = "TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION"; break;
      default: label = "unknown"; break;
    }
  }
  const bool backtrace = event_class >= 67 && event_class <= 69;
  return "CUPTI_ACTIVITY_KIND_RUNTIME rows of eventClass " + std::to_string(event_class) + " (" + label + ")" +
         (backtrace ? ": call stacks of calls counted once, not calls" : ": not CUDA calls");
}

template <typename Rows>  // SqliteQuery or IntegerRows
int64_t get(const Rows& q, int column, int64_t fallback) {
  return column < 0 || q.is_null(column) ? fallback : q.integer(column);
}

struct RuntimeCall {
  size_t op = 0;          // builder handle of the host op made for the call
  double start_ns = 0;
  ApiRole role = ApiRole::Other;
  const Text* name = nullptr;  // into the string table, suffix kept as nsys wrote it
};

// Runtime calls by (process, correlation id), for the GPU rows that join to them. CUPTI numbers a
// process's API calls with consecutive correlation ids, so per process a vector indexed by
// id - first id finds a call with one load, where a hash map costs a node per call and a hash per
// lookup (x64 cloverleaf export: 213 k calls, ~10 MB of nodes). A process whose ids are sparse
// (spanning more than 4x its calls) gets a hash map. A key added twice keeps its last call, as an
// assignment into a map would.
class CallIndex {
 public:
  void reserve(size_t calls) {
    keys_.reserve(calls);
    calls_.reserve(calls);
  }

  void add(int64_t process, int64_t correlation, const RuntimeCall& call) {
    keys_.push_back({process, correlation});
    calls_.push_back(call);
  }

  // After the last add, before the first find.
  void build() {
    for (size_t i = 0; i < keys_.size(); ++i) {
      PerProcess& p = process(keys_[i].process);
      p.first = std::min(p.first, keys_[i].correlation);
      p.last = std::max(p.last, keys_[i].correlation);
      ++p.calls;
    }
    for (PerProcess& p : processes_) {
      const uint64_t span = static_cast<uint64_t>(p.last) - static_cast<uint64_t>(p.first) + 1;
      if (span <= 4 * static_cast<uint64_t>(p.calls) + 1024) p.dense.assign(span, -1);
      else p.sparse.reserve(p.calls);
    }
    for (size_t i = 0; i < keys_.size(); ++i) {
      PerProcess& p = process(keys_[i].process);
      const int32_t index = static_cast<int32_t>(i);
      if (!p.dense.empty()) p.dense[keys_[i].correlation - p.first] = index;
      else p.sparse[keys_[i].correlation] = index;
    }
    keys_ = {};
  }

  const RuntimeCall* find(int64_t process, int64_t correlation) const {
    for (const PerProcess& p : processes_) {
      if (p.process != process) continue;
      if (correlation < p.first || correlation > p.last) return nullptr;
      int32_t index = -1;
      if (!p.dense.empty()) {
        index = p.dense[correlation - p.first];
      } else {
        const auto found = p.sparse.find(correlation);
        if (found != p.sparse.end()) index = found->second;
      }
      return index < 0 ? nullptr : &calls_[index];
    }
    return nullptr;
  }

 private:
  struct Key {
    int64_t process, correlation;
  };
  struct PerProcess {
    int64_t process = 0;
    int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
    int64_t calls = 0;
    std::vector<int32_t> dense;                    // index into calls_ per id - first, -1 none
    std::unordered_map<int64_t, int32_t> sparse;   // when the ids are too spread out for that
  };
  // A trace has one process per rank file, rarely more: a linear search beats a map.
  PerProcess& process(int64_t id) {
    for (PerProcess& p : processes_) {
      if (p.process == id) return p;
    }
    processes_.emplace_back();
    processes_.back().process = id;
    return processes_.back();
  }
  std::vector<Key> keys_;  // until build()
  std::vector<RuntimeCall> calls_;
  std::vector<PerProcess> processes_;
};

class NsysReader {
 public:
  NsysReader(const std::string& path, TraceContents* contents) : db_(path), builder_("nsys: " + path), contents_(contents) {}

  EventModel read(int first_rank) {
    const bool meta = db_.has_table("META_DATA_EXPORT") || db_.has_table("EXPORT_META_DATA");
    if (!meta && !db_.has_table("StringIds") && !db_.has_table("CUPTI_ACTIVITY_KIND_KERNEL")) {
      throw InputError(db_.path(), "SQLite database is not an Nsight Systems export "
                                   "(no META_DATA_EXPORT, EXPORT_META_DATA or StringIds table)");
    }
    read_strings();
    read_streams();
    // The GPU activity tables are read through a second connection on another thread while this
    // one reads the API calls they join to (SQLite connections are not shared between threads);
    // the rows are then added here in the same order as ever, so the model does not depend on the
    // threads' timing. Columns are chosen here, from the schema, before the thread starts.
    const GpuTables gpu(db_);
    const GpuColumns &kernels = gpu.kernels, &copies = gpu.copies, &memsets = gpu.memsets,
                     &event_records = gpu.event_records, &syncs = gpu.syncs;
    const std::array<const GpuColumns*, 5> tables = gpu.all();
    const std::array<bool, 5> use = gpu.use();
    std::array<IntegerRows, 5> rows;
    int64_t gpu_rows = 0;
    for (size_t t = 0; t < rows.size(); ++t) {
      if (!use[t]) continue;
      const int64_t expected = db_.max_rowid(tables[t]->table);
      rows[t] = IntegerRows(tables[t]->columns.size(), expected);
      gpu_rows += expected;
    }
    // A second connection costs ~1 ms to open (the schema of ~90 tables is read again): for a small
    // export the rows are read on this thread, after the API calls, instead.
    constexpr int64_t kSecondConnectionRows = 20000;
    const auto policy = gpu_rows >= kSecondConnectionRows ? std::launch::async : std::launch::deferred;
    auto ahead = std::async(policy, [&db = db_, &tables, &use, &rows, policy] {
      std::optional<SqliteDatabase> second;
      if (policy == std::launch::async) second.emplace(db.path());
      const SqliteDatabase& connection = second ? *second : db;
      for (size_t t = 0; t < rows.size(); ++t) {
        if (use[t]) rows[t].read(connection, tables[t]->columns.select());
      }
    });
    read_runtime();
    ahead.get();
    if (use[0]) read_kernels(rows[0], kernels);
    if (use[1]) read_copies(rows[1], copies);
    if (use[2]) read_memsets(rows[2], memsets);
    if (use[3]) read_event_records(rows[3], event_records);
    if (use[4]) read_synchronization(rows[4], syncs);
    read_nvtx();
    return builder_.finish(first_rank);
  }

 private:
  // Ops share the table's Text: one copy of each kernel name however often it runs.
  const Text& string_at(int64_t id) const {
    static const Text empty;
    return id >= 0 && static_cast<size_t>(id) < strings_.size() ? strings_[id] : empty;
  }

  void read_strings() {
    if (!db_.has_table("StringIds")) return;
    SqliteQuery q(db_, kStringsQuery);
    while (q.step()) {
      const int64_t id = q.integer(0);
      if (id < 0 || id > (int64_t{1} << 28)) continue;
      if (static_cast<size_t>(id) >= strings_.size()) strings_.resize(id + 1);
      strings_[id] = Text(q.text_view(1));
    }
  }

  // Devices per (process, context) come from TARGET_INFO_CUDA_CONTEXT_INFO; stream rows carry no
  // device of their own.
  void read_streams() {
    // (process, context) -> device. A few contexts per export. (The key was once process << 20 |
    // context: a context id of 2^20 or more named another process's context, and a process id of
    // 2^43 or more overflowed the shift; found by fuzz/nsys_sql.)
    std::map<std::pair<int64_t, int64_t>, int64_t> device_of_context;
    if (db_.has_table("TARGET_INFO_CUDA_CONTEXT_INFO")) {
      ColumnList c(db_, "TARGET_INFO_CUDA_CONTEXT_INFO");
      const int process = c.want("processId"), context = c.want("contextId"), device = c.want("deviceId"),
                null_stream = c.want("nullStreamId");
      if (process >= 0 && context >= 0 && device >= 0) {
        SqliteQuery q(db_, c.select());
        while (q.step()) {
          const int64_t p = q.integer(process), ctx = q.integer(context), dev = q.integer(device);
          device_of_context[{p, ctx}] = dev;
          if (null_stream >= 0 && !q.is_null(null_stream)) builder_.declare_null_stream({p, dev, ctx, q.integer(null_stream)});
        }
      }
    }
    if (!db_.has_table("TARGET_INFO_CUDA_STREAM")) return;
    ColumnList c(db_, "TARGET_INFO_CUDA_STREAM");
    const int stream = c.want("streamId"), process = c.want("processId"), context = c.want("contextId"),
              priority = c.want("priority"), flag = c.want("flag");
    if (stream < 0 || process < 0 || context < 0) return;
    SqliteQuery q(db_, c.select());
    while (q.step()) {
      const int64_t p = q.integer(process), ctx = q.integer(context);
      const auto device = device_of_context.find({p, ctx});
      StreamFlags flags;
      // flag: 1 default (blocking) stream, 2 non-blocking, 3 the null stream (legacy default).
      const int64_t f = get(q, flag, 0);
      flags.legacy_default = f == 3;
      flags.non_blocking = f == 2;
      // priority is stored as uint32: 4294967291 is -5 (a high-priority stream).
      flags.priority = static_cast<int32_t>(static_cast<uint32_t>(get(q, priority, 0)));
      builder_.declare_stream({p, device == device_of_context.end() ? 0 : device->second, ctx, q.integer(stream)},
                              flags);
    }
  }

  // Every runtime/driver call becomes one host op: a sync op for the synchronising calls (its
  // stream or event filled in from the SYNCHRONIZATION record later), HostCompute otherwise.
  void read_runtime() {
    const RuntimeColumns c(db_);
    if (!c.usable()) return;
    const int start = c.start, end = c.end, tid = c.tid, correlation = c.correlation, name = c.name,
              event_class = c.event_class;
    std::map<int64_t, int64_t> not_calls;  // rows by eventClass that are not calls
    roles_.resize(strings_.size(), -1);
    // Per name id, the name without its version suffix: classified and stripped once, not per call.
    std::vector<Text> stripped(strings_.size());
    // Room for every call up front (rowid counts rows of an nsys table, which are only appended).
    calls_.reserve(static_cast<size_t>(std::max<int64_t>(0, db_.max_rowid(c.columns.table()))));
    SqliteQuery q(db_, c.columns.select());
    while (q.step()) {
      if (event_class >= 0 && !q.is_null(event_class) && !is_call_class(q.integer(event_class))) {
        ++not_calls[q.integer(event_class)];
        continue;
      }
      const int64_t name_id = q.integer(name);
      const Text& api = string_at(name_id);
      ApiRole role = ApiRole::Other;
      const bool known = name_id >= 0 && static_cast<size_t>(name_id) < roles_.size();
      if (known) {
        if (roles_[name_id] < 0) {
          roles_[name_id] = static_cast<int>(classify_api(api));
          const std::string_view bare = strip_api_version(api);
          stripped[name_id] = bare.size() == api.size() ? api : Text(bare);
        }
        role = static_cast<ApiRole>(roles_[name_id]);
      }
      const int64_t process = process_of(get(q, tid, 0));
      Op op;
      op.kind = host_kind(role);
      op.name = known ? stripped[name_id] : Text(strip_api_version(api));
      op.source_api = api;
      op.blocks_host = blocks_host(role);
      op.start_ns = static_cast<double>(q.integer(start));
      if (end >= 0) op.duration_ns = static_cast<double>(q.integer(end)) - op.start_ns;
      op.correlation = q.integer(correlation);
      const size_t handle = builder_.add_op(std::move(op), process, static_cast<double>(q.integer(start)));
      calls_.add(process, q.integer(correlation), RuntimeCall{handle, static_cast<double>(q.integer(start)), role, &api});
    }
    calls_.build();
    if (contents_ && !not_calls.empty()) {
      std::map<int64_t, std::string> class_names;
      if (db_.has_table("ENUM_NSYS_EVENT_CLASS")) {
        ColumnList e(db_, "ENUM_NSYS_EVENT_CLASS");
        const int id = e.want("id"), label = e.want("name");
        if (id >= 0 && label >= 0) {
          SqliteQuery names(db_, e.select());
          while (names.step()) {
            if (!names.is_null(id) && !names.is_null(label)) class_names[names.integer(id)] = std::string(names.text_view(label));
          }
        }
      }
      for (const auto& [event_class_id, rows] : not_calls) {
        contents_->rows_not_ops[event_class_label(event_class_id, class_names)] += rows;
      }
    }
  }

  static OpKind host_kind(ApiRole role) {
    switch (role) {
      case ApiRole::EventSync: return OpKind::EventSync;
      case ApiRole::StreamSync: return OpKind::StreamSync;
      case ApiRole::DeviceSync: return OpKind::DeviceSync;
      // A stream wait or event record is HostCompute until its SYNCHRONIZATION / CUDA_EVENT row
      // says which stream it acted on.
      default: return OpKind::HostCompute;
    }
  }

  const RuntimeCall* call_of(int64_t process, int64_t correlation) const { return calls_.find(process, correlation); }

  // Adds a GPU op on its stream, issued when its API call started (GPU start if the call is
  // missing), and returns its handle and the call.
  std::pair<size_t, const RuntimeCall*> add_gpu_op(Op op, const IntegerRows& q, const GpuColumns& g) {
    const int64_t process = process_of(get(q, g.pid, 0));
    const int64_t correlation = get(q, g.correlation, -1);
    op.start_ns = static_cast<double>(q.integer(g.start));
    op.duration_ns = static_cast<double>(q.integer(g.end)) - op.start_ns;
    op.correlation = correlation;
    const RuntimeCall* call = correlation >= 0 ? call_of(process, correlation) : nullptr;
    if (call) op.source_api = *call->name;
    const size_t handle = builder_.add_op(std::move(op), process, call ? call->start_ns : q.real(g.start));
    builder_.set_stream(handle, {process, get(q, g.device, 0), get(q, g.context, 0), q.integer(g.stream)});
    return {handle, call};
  }

  // extra: demangledName, shortName. demangledName is what Kineto reports too; 2022 exports may
  // only have shortName.
  void read_kernels(IntegerRows& q, const GpuColumns& g) {
    const int name = g.extra[0] >= 0 ? g.extra[0] : g.extra[1];
    std::vector<signed char> collective(strings_.size(), -1);  // per name id: -1 unknown, 0/1
    while (q.step()) {
      Op op;
      const int64_t name_id = get(q, name, -1);
      op.name = string_at(name_id);
      bool is_collective;
      if (name_id >= 0 && static_cast<size_t>(name_id) < collective.size()) {
        if (collective[name_id] < 0) collective[name_id] = is_collective_kernel(op.name) ? 1 : 0;
        is_collective = collective[name_id] == 1;
      } else {
        is_collective = is_collective_kernel(op.name);
      }
      op.kind = is_collective ? OpKind::Collective : OpKind::Kernel;
      add_gpu_op(std::move(op), q, g);
    }
  }

  // extra: bytes, copyKind, srcKind, dstKind.
  void read_copies(IntegerRows& q, const GpuColumns& g) {
    const int bytes = g.extra[0], kind = g.extra[1], src = g.extra[2], dst = g.extra[3];
    while (q.step()) {
      Op op;
      op.kind = OpKind::Copy;
      op.copy = copy_kind(get(q, kind, 0));
      op.source = memory_kind(get(q, src, 7));
      op.destination = memory_kind(get(q, dst, 7));
      op.bytes = get(q, bytes, 0);
      op.name = names_(std::string("Memcpy ") + to_string(op.copy) + " (" + to_string(op.source) + " -> " +
                       to_string(op.destination) + ")");
      const auto [handle, call] = add_gpu_op(std::move(op), q, g);
      builder_.op(handle).blocks_host = copy_blocks_host(builder_.op(handle), call);
    }
  }

  // cudaMemcpy returns when the copy is done; cudaMemcpyAsync from or to pageable memory is
  // staged through a pinned buffer by the driver and is synchronous with the host as well (CUDA
  // Runtime API, "API synchronization behavior").
  static bool copy_blocks_host(const Op& op, const RuntimeCall* call) {
    if (call && (call->role == ApiRole::SyncCopy || call->role == ApiRole::SyncMemset)) return true;
    return op.source == MemoryKind::PageableHost || op.destination == MemoryKind::PageableHost;
  }

  // extra: bytes, memKind.
  void read_memsets(IntegerRows& q, const GpuColumns& g) {
    const int bytes = g.extra[0], kind = g.extra[1];
    while (q.step()) {
      Op op;
      op.kind = OpKind::Memset;
      op.destination = memory_kind(get(q, kind, 7));
      op.bytes = get(q, bytes, 0);
      op.name = names_(std::string("Memset (") + to_string(op.destination) + ")");
      const auto [handle, call] = add_gpu_op(std::move(op), q, g);
      builder_.op(handle).blocks_host = copy_blocks_host(builder_.op(handle), call);
    }
  }

  // Events are named by (context, eventId); CUDA reuses an event id for every record of the same
  // cudaEvent_t, and a wait refers to the latest record issued before it, which the model's issue
  // order gives.
  void attach_event(size_t handle, int64_t process, int64_t context, int64_t event_id) {
    builder_.set_event(handle, process, context, event_id, "event " + std::to_string(event_id));
  }

  // CUPTI_ACTIVITY_KIND_CUDA_EVENT exists only when CUDA event tracing was on
  // (--cuda-event-trace=true); it says which stream each cudaEventRecord acted on. extra: eventId.
  void read_event_records(IntegerRows& q, const GpuColumns& g) {
    const int event = g.extra[0];
    while (q.step()) {
      const int64_t process = process_of(get(q, g.pid, 0));
      const RuntimeCall* call = call_of(process, get(q, g.correlation, -1));
      size_t handle;
      if (call) {
        handle = call->op;
      } else {
        Op op;
        op.name = names_("cudaEventRecord");
        op.start_ns = get(q, g.start, -1);
        op.correlation = get(q, g.correlation, -1);
        handle = builder_.add_op(std::move(op), process, static_cast<double>(get(q, g.start, 0)));
      }
      Op& op = builder_.op(handle);
      op.kind = OpKind::EventRecord;
      const int64_t ctx = get(q, g.context, 0);
      builder_.set_stream(handle, {process, get(q, g.device, 0), ctx, q.integer(g.stream)});
      attach_event(handle, process, ctx, q.integer(event));
    }
  }

  // A SYNCHRONIZATION record gives the stream or event of a sync call; the call's name (joined by
  // correlationId) says what kind of sync it was. extra: eventId, syncType.
  void read_synchronization(IntegerRows& q, const GpuColumns& g) {
    const int event = g.extra[0], type = g.extra[1];
    while (q.step()) {
      const int64_t process = process_of(get(q, g.pid, 0));
      const RuntimeCall* call = call_of(process, get(q, g.correlation, -1));
      const ApiRole role = call ? call->role : role_from_sync_type(get(q, type, 0));
      // The name wins: CUPTI also writes records for calls that do not block (cudaEventQuery,
      // cudaStreamQuery); those stay HostCompute. A record whose call is not in the export and
      // whose syncType names no known sync says nothing the model can use.
      if (!is_sync_role(role)) continue;
      size_t handle;
      if (call) {
        handle = call->op;
      } else {
        // Host time in a sync call the export lost; the switch below makes it the sync it was. A
        // wait without a stream stays host time, not the Op default (a kernel).
        Op op;
        op.kind = OpKind::HostCompute;
        op.start_ns = static_cast<double>(q.integer(g.start));
        op.duration_ns = static_cast<double>(q.integer(g.end)) - op.start_ns;
        op.correlation = get(q, g.correlation, -1);
        const double issue = op.start_ns;
        handle = builder_.add_op(std::move(op), process, issue);
      }
      const int64_t ctx = get(q, g.context, 0), dev = get(q, g.device, 0);
      const int64_t stream_id = get(q, g.stream, kNotApplicable), event_id = get(q, event, kNotApplicable);
      Op& op = builder_.op(handle);
      switch (role) {
        case ApiRole::StreamWait:
          if (stream_id == kNotApplicable) break;
          op.kind = OpKind::StreamWait;
          op.blocks_host = false;
          builder_.set_stream(handle, {process, dev, ctx, stream_id});
          if (event_id != kNotApplicable) attach_event(handle, process, ctx, event_id);
          break;
        case ApiRole::EventSync:
          op.kind = OpKind::EventSync;
          op.blocks_host = true;
          if (event_id != kNotApplicable) attach_event(handle, process, ctx, event_id);
          break;
        case ApiRole::StreamSync:
          op.kind = OpKind::StreamSync;
          op.blocks_host = true;
          if (stream_id != kNotApplicable) builder_.set_sync_stream(handle, {process, dev, ctx, stream_id});
          break;
        case ApiRole::DeviceSync:
          op.kind = OpKind::DeviceSync;
          op.blocks_host = true;
          break;
        default:
          break;
      }
      if (op.name.empty()) op.name = names_(to_string(op.kind));
    }
  }

  // NVTX push/pop (59) and start/end (60) ranges and marks (34) become Marker ops; domain
  // creation (75) and other bookkeeping rows are skipped.
  void read_nvtx() {
    const NvtxColumns c(db_);
    if (!c.usable()) return;
    const int start = c.start, end = c.end, type = c.type, text = c.text, text_id = c.text_id, tid = c.tid;
    SqliteQuery q(db_, c.columns.select());
    while (q.step()) {
      const int64_t event_type = q.integer(type);
      if (event_type != 59 && event_type != 60 && event_type != 34) continue;
      Op op;
      op.kind = OpKind::Marker;
      op.name = text >= 0 && !q.is_null(text) ? names_(q.text_view(text)) : string_at(get(q, text_id, -1));
      op.start_ns = static_cast<double>(q.integer(start));
      op.duration_ns = event_type == 34 ? 0 : (end >= 0 && !q.is_null(end) ? q.integer(end) - op.start_ns : -1);
      builder_.add_op(std::move(op), process_of(get(q, tid, 0)), static_cast<double>(q.integer(start)));
    }
  }

  SqliteDatabase db_;
  TraceBuilder builder_;
  std::vector<Text> strings_;
  TextInterner names_;  // names made here (copies, memsets, NVTX text): one Text each
  std::vector<int> roles_;  // ApiRole per string id, -1 not yet classified
  CallIndex calls_;
  TraceContents* contents_;  // may be null
};

}  // namespace

std::vector<NsysQuery> nsys_activity_queries(const std::string& path) {
  const SqliteDatabase db(path);
  std::vector<NsysQuery> queries;
  if (db.has_table("StringIds")) queries.push_back({"StringIds", kStringsQuery});
  const RuntimeColumns runtime(db);
  if (runtime.usable()) queries.push_back({runtime.columns.table(), runtime.columns.select()});
  const GpuTables gpu(db);
  const std::array<bool, 5> use = gpu.use();
  const std::array<const GpuColumns*, 5> tables = gpu.all();
  for (size_t t = 0; t < use.size(); ++t) {
    if (use[t]) queries.push_back({tables[t]->table, tables[t]->columns.select()});
  }
  const NvtxColumns nvtx(db);
  if (nvtx.usable()) queries.push_back({nvtx.columns.table(), nvtx.columns.select()});
  return queries;
}

EventModel import_nsys_sqlite(const std::string& path, int first_rank, TraceContents* contents) {
  if (contents) contents->file = path;
  return NsysReader(path, contents).read(first_rank);
}

}  // namespace hookstream
