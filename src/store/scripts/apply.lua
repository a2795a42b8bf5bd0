-- Apply one chunk of a recorded window to the counters, at most once.
--
-- KEYS[1] applied marker of the window (HASH chunk -> failures)
-- KEYS[2] known: (ZSET)   KEYS[3..] count:PREC:NAME hashes, one per cell
-- ARGV[1] chunk index     ARGV[2] marker TTL in seconds (a safety net: the
-- worker that finishes the window shortens it)
-- ARGV[3] deadline: unix seconds on the Redis clock before which the members
--         left out below are surely in known: (0 when none is left out)
-- ARGV[4] length of the key prefix before PREC:NAME in KEYS (prefix..'count:')
-- ARGV[5..4+2n] per cell: bucket field, delta
-- ARGV[5+2n..]  cell numbers (1-based) whose member PREC:NAME to ZADD, each
--               member once
--
-- The worker leaves out the ZADD of members it added recently enough that
-- the cleaner cannot have removed them (see the Rust module `known`): a
-- member leaves known: only when its hash is empty, and the hash still holds
-- the bucket written with that ZADD until the deadline. Past the deadline
-- the script writes nothing and returns {-1, ''}; the worker then applies
-- again with every ZADD.
--
-- A chunk already marked returns {0, its recorded failures} and writes
-- nothing, so replays (a retry after a lost reply, a recovering worker) never
-- count twice. A cell whose HINCRBY fails (wrong type, overflow) is left out
-- (its member too) and reported; the others are counted. HINCRBY comes before
-- ZADD so that the cleaner, which drops a member only when its hash is empty,
-- cannot orphan a counter. Out of memory: Redis refuses every write of the
-- script, nothing is written, and the error goes back to the worker, which
-- retries later.
-- Returns {1, failures}, failures one "cell_number<TAB>error" per line.

local done = redis.call('HGET', KEYS[1], ARGV[1])
if done then
    return {0, done}
end
local deadline = tonumber(ARGV[3])
if deadline > 0 and tonumber(redis.call('TIME')[1]) >= deadline then
    return {-1, ''}
end

local n = #KEYS - 2
local failed, bad = {}, nil
for i = 1, n do
    local r = redis.pcall('HINCRBY', KEYS[i + 2], ARGV[2 * i + 3], ARGV[2 * i + 4])
    if type(r) == 'table' and r.err then
        if string.sub(r.err, 1, 3) == 'OOM' then
            return redis.error_reply(r.err)
        end
        failed[#failed + 1] = i .. '\t' .. r.err
        bad = bad or {}
        bad[i] = true
    end
end

local skip = tonumber(ARGV[4]) + 1
local members, m = {}, 0
for j = 2 * n + 5, #ARGV do
    local i = tonumber(ARGV[j])
    if not (bad and bad[i]) then
        members[m + 1] = 0
        members[m + 2] = string.sub(KEYS[i + 2], skip)
        m = m + 2
        -- unpack() is bounded by Lua's C stack: add members in slices.
        if m >= 2000 then
            redis.call('ZADD', KEYS[2], unpack(members, 1, m))
            m = 0
        end
    end
end
if m > 0 then
    redis.call('ZADD', KEYS[2], unpack(members, 1, m))
end

local result = table.concat(failed, '\n')
redis.call('HSET', KEYS[1], ARGV[1], result)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return {1, result}
