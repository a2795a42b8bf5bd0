-- Apply one chunk of a recorded window to the counters, at most once.
--
-- KEYS[1] applied marker of the window (HASH chunk -> failures)
-- KEYS[2] known: (ZSET)   KEYS[3..] count:PREC:NAME hashes, one per cell
-- ARGV[1] chunk index     ARGV[2] marker TTL in seconds (a safety net: the
-- worker that finishes the window shortens it)
-- ARGV[3..] per cell: bucket field, delta, known: member
--
-- A chunk already marked returns its recorded failures and writes nothing, so
-- replays (a retry after a lost reply, a recovering worker) never count twice.
-- A cell whose HINCRBY fails (wrong type, overflow) is left out and reported;
-- the others are counted. HINCRBY comes before ZADD so that the cleaner,
-- which drops a member only when its hash is empty, cannot orphan a counter.
-- Out of memory: Redis refuses every write of the script, nothing is written,
-- and the error goes back to the worker, which retries later.
-- Returns the failures, one "cell_index<TAB>error" per line ('' when none).

local done = redis.call('HGET', KEYS[1], ARGV[1])
if done then
    return done
end

local failed = {}
local members, seen = {}, {}
for i = 3, #KEYS do
    local a = (i - 3) * 3 + 3
    local r = redis.pcall('HINCRBY', KEYS[i], ARGV[a], ARGV[a + 1])
    if type(r) == 'table' and r.err then
        if string.sub(r.err, 1, 3) == 'OOM' then
            return redis.error_reply(r.err)
        end
        failed[#failed + 1] = (i - 2) .. '\t' .. r.err
    else
        local m = ARGV[a + 2]
        if not seen[m] then
            seen[m] = true
            members[#members + 1] = 0
            members[#members + 1] = m
            -- unpack() is bounded by Lua's C stack: add members in slices.
            if #members >= 1000 then
                redis.call('ZADD', KEYS[2], unpack(members))
                members = {}
            end
        end
    end
end
if #members > 0 then
    redis.call('ZADD', KEYS[2], unpack(members))
end

local result = table.concat(failed, '\n')
redis.call('HSET', KEYS[1], ARGV[1], result)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return result
