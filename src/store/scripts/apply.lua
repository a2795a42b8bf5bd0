-- Apply one chunk of a recorded window to the counters and statistics, at
-- most once.
--
-- KEYS[1] applied marker of the window (HASH chunk -> failures)
-- KEYS[2] known: (ZSET)   KEYS[3] stats:known: (ZSET)
-- KEYS[4..3+n] count:PREC:NAME hashes, one per count cell
-- KEYS[4+n..]  stats:PREC:NAME hashes, one per statistics cell
-- ARGV[1] chunk index     ARGV[2] marker TTL in seconds (a safety net: the
-- worker that finishes the window shortens it)
-- ARGV[3] deadline: unix seconds on the Redis clock before which the members
--         left out below are surely in known: (0 when none is left out)
-- ARGV[4] length of the key prefix before PREC:NAME in KEYS (prefix..'count:')
-- ARGV[5] n, the number of count cells
-- ARGV[6] length of the prefix before PREC:NAME of the stats keys
--         (prefix..'stats:'), or 0 to add no member to stats:known: (on a
--         cluster, where the worker adds them after the script)
-- ARGV[7..6+2n] per count cell: bucket field, delta
-- then Z, then Z count cell numbers (1-based) whose member PREC:NAME to ZADD
--         to known:, each member once
-- then per statistics cell: bucket B, count, sum, sum of squares, min, max
--         (decimal, as HINCRBYFLOAT takes them), H, then H pairs of a
--         histogram field (B:h:SUFFIX) and its count: written as HINCRBYFLOAT
--         B:sum and B:sumsq, then one HSET of B:count and each B:h:SUFFIX
--         (their sums) and of B:min and B:max when lower and higher.
--
-- The worker leaves out the ZADD of members it added recently enough that
-- the cleaner cannot have removed them (see the Rust module `known`): a
-- member leaves known: only when its hash is empty, and the hash still holds
-- the bucket written with that ZADD until the deadline. Past the deadline
-- the script writes nothing and returns {-1, ''}; the worker then applies
-- again with every ZADD. Members of stats:known: are always added.
--
-- A chunk already marked returns {0, its recorded failures} and writes
-- nothing, so replays (a retry after a lost reply, a recovering worker) never
-- count twice: sums and histograms are not idempotent, and the min/max
-- compare-and-set is safe only under the same marker. A cell whose write
-- fails (wrong type, overflow) is left out (its member too) and reported;
-- the others are counted. HINCRBY comes before ZADD so that the cleaner,
-- which drops a member only when its hash is empty, cannot orphan a counter.
-- Out of memory: Redis refuses every write of the script, nothing is
-- written, and the error goes back to the worker, which retries later.
-- Returns {1, failures}, failures one "cell_number<TAB>error" per line for
-- count cells, "s<statistics cell number><TAB>error" for the others.

local done = redis.call('HGET', KEYS[1], ARGV[1])
if done then
    return {0, done}
end
local deadline = tonumber(ARGV[3])
if deadline > 0 and tonumber(redis.call('TIME')[1]) >= deadline then
    return {-1, ''}
end

local n = tonumber(ARGV[5])
local failed, bad = {}, nil
for i = 1, n do
    local r = redis.pcall('HINCRBY', KEYS[i + 3], ARGV[2 * i + 5], ARGV[2 * i + 6])
    if type(r) == 'table' and r.err then
        if string.sub(r.err, 1, 3) == 'OOM' then
            return redis.error_reply(r.err)
        end
        failed[#failed + 1] = i .. '\t' .. r.err
        bad = bad or {}
        bad[i] = true
    end
end

-- unpack() is bounded by Lua's C stack: add members in slices.
local function zadd_all(zset, members)
    for from = 1, #members, 2000 do
        redis.call('ZADD', zset, unpack(members, from, math.min(from + 1999, #members)))
    end
end

local skip = tonumber(ARGV[4]) + 1
local members = {}
local a = 2 * n + 7
local z = tonumber(ARGV[a])
for j = a + 1, a + z do
    local i = tonumber(ARGV[j])
    if not (bad and bad[i]) then
        members[#members + 1] = 0
        members[#members + 1] = string.sub(KEYS[i + 3], skip)
    end
end
zadd_all(KEYS[2], members)
a = a + z + 1

-- One statistics cell: its fields at ARGV[at..]. All or nothing: the
-- fields it adds to are read first (one HMGET, which also fails on a key
-- of another type) and a field that does not hold a number fails the cell
-- before anything is written; the float increments go first, so an ACL
-- that refuses HINCRBYFLOAT refuses the cell's first write.
local function observe(key, at)
    local b = ARGV[at]
    local h = tonumber(ARGV[at + 6])
    local fields = {b .. ':count', b .. ':sum', b .. ':sumsq', b .. ':min', b .. ':max'}
    for j = 1, h do
        fields[5 + j] = ARGV[at + 5 + 2 * j]
    end
    local cur = {}
    for from = 1, #fields, 1000 do
        local part = redis.call('HMGET', key, unpack(fields, from, math.min(from + 999, #fields)))
        for j = 1, #part do
            cur[from + j - 1] = part[j]
        end
    end
    for j = 1, #fields do
        local v = cur[j]
        local integer = j == 1 or j > 5
        if v and not (integer and string.match(v, '^-?%d+$') or not integer and tonumber(v)) then
            error('statistics field ' .. fields[j] .. ' holds ' .. v .. ', not a number')
        end
    end
    redis.call('HINCRBYFLOAT', key, fields[2], ARGV[at + 2])
    redis.call('HINCRBYFLOAT', key, fields[3], ARGV[at + 3])
    -- The count, the new min and max and every histogram field in one
    -- HSET: the fields were just read, so their sums are known (a command
    -- per field cost several times the field). Lua's numbers are doubles:
    -- a sum that is not surely exact (2^53 or more) goes by HINCRBY.
    local set = {}
    local function add(j, delta)
        local v = (tonumber(cur[j]) or 0) + tonumber(delta)
        if math.abs(v) < 9007199254740992 then
            set[#set + 1] = fields[j]
            -- A number argument goes to Redis as %.17g: an integer below
            -- 2^53 in plain digits.
            set[#set + 1] = v
        else
            redis.call('HINCRBY', key, fields[j], delta)
        end
    end
    add(1, ARGV[at + 1])
    if not cur[4] or tonumber(ARGV[at + 4]) < tonumber(cur[4]) then
        set[#set + 1] = fields[4]
        set[#set + 1] = ARGV[at + 4]
    end
    if not cur[5] or tonumber(ARGV[at + 5]) > tonumber(cur[5]) then
        set[#set + 1] = fields[5]
        set[#set + 1] = ARGV[at + 5]
    end
    for j = 1, h do
        add(5 + j, ARGV[at + 6 + 2 * j])
    end
    for from = 1, #set, 2000 do
        redis.call('HSET', key, unpack(set, from, math.min(from + 1999, #set)))
    end
end

local stats_skip = tonumber(ARGV[6])
local stats_members, last = {}, nil
for k = n + 4, #KEYS do
    local next_a = a + 7 + 2 * tonumber(ARGV[a + 6])
    local ok, err = pcall(observe, KEYS[k], a)
    if ok then
        if stats_skip > 0 and KEYS[k] ~= last then
            stats_members[#stats_members + 1] = 0
            stats_members[#stats_members + 1] = string.sub(KEYS[k], stats_skip + 1)
            last = KEYS[k]
        end
    else
        local text = type(err) == 'table' and err.err or tostring(err)
        if string.sub(text, 1, 3) == 'OOM' then
            return redis.error_reply(text)
        end
        failed[#failed + 1] = 's' .. (k - n - 3) .. '\t' .. text
    end
    a = next_a
end
zadd_all(KEYS[3], stats_members)

local result = table.concat(failed, '\n')
redis.call('HSET', KEYS[1], ARGV[1], result)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return {1, result}
