-- Record the summed count cells of several windows as a window of their
-- own (the carry), taking those cells out of the windows it sums, in one
-- atomic step next to the stream. Every key here shares the stream's slot.
--
-- KEYS[1] windows (ZSET)   KEYS[2] record of the carry   KEYS[3] this
--         consumer name's registration (see register.lua)
-- then per window i (i = 1..n): its record, and on one Redis its applied
--         marker (ARGV[9] = 1; on a cluster the markers are in other
--         slots: ARGV[9] = 0)
-- ARGV[1] consumer  ARGV[2] this worker's registration token
-- ARGV[3] registration lifetime, ms   ARGV[4] marker TTL, seconds
-- ARGV[5] carry id  ARGV[6] cells per chunk  ARGV[7] chunk count
-- ARGV[8] n   ARGV[9] 1 when the markers are given, else 0
-- ARGV[10] the group it is applied with on a cluster ('' when none: see
--         apply_group.lua), recorded as its field `group`
-- then (from ARGV[11]) per window: its id, the first and the last + 1 of
--         its chunks whose cells the carry holds
--
-- The carry's cells (MessagePack, megabytes) are not an argument: a large
-- argument costs a script milliseconds (6 ms for 5 MB, against 0.3 ms for
-- a plain HSET). The worker writes them first into the record, alone and
-- with a TTL (`pieces` = k and the cells in k fields `cells`, `cells:1`
-- ... `cells:k-1`, PEXPIRE: not yet a record, nothing lists it); this
-- script makes that hash the record (owner, ids, chunks; no TTL) and lists
-- it, or deletes it when a window is gone (another refusal leaves it to
-- its TTL).
--
-- Each window was committed by this consumer and not applied (the worker
-- sends 0 and its chunk count: every chunk waits); its entries are still
-- pending. The carry marks the window as carried (so that whoever finishes
-- it, this worker after a resync or another one recovering it, applies
-- none of its cells: take.lua) and, on one Redis, those chunks applied in
-- the window's marker too. It refuses, writing nothing, when a window is
-- gone or not this consumer's, already carried, taken by a worker
-- finishing it (take.lua), or has one of those chunks applied:
-- {'gone', window}; the worker then resyncs, and the windows are finished
-- one by one as recorded.
-- Returns {'ok'|'dup'|'taken'|'gone', detail}.

local consumer, token, lifetime, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local holder = redis.call('GET', KEYS[3])
if holder ~= token then
    if holder then
        return {'taken', holder}
    end
    redis.call('SET', KEYS[3], token, 'PX', lifetime)
end
-- HGET, not HEXISTS: the commands of deploy/redis/hitcount.acl suffice.
if redis.call('HGET', KEYS[2], 'owner') then
    redis.call('PERSIST', KEYS[2])
    return {'dup', ARGV[5]}
end
local pieces = tonumber(redis.call('HGET', KEYS[2], 'pieces'))
if not pieces or redis.call('HLEN', KEYS[2]) ~= pieces + 1 then
    return redis.error_reply('the carry ' .. ARGV[5] .. ' has no cells written')
end

-- Calls f with the marker fields of chunks first..last-1 (each followed by
-- '' when `valued`), 1,000 chunks at a time: one command per slice rather
-- than per chunk (a carry can sum thousands of chunks: one HSET each took
-- 10 ms), and unpack() is bounded by Lua's C stack.
local function each_slice(first, last, valued, f)
    for from = first, last - 1, 1000 do
        local fields = {}
        for c = from, math.min(from + 999, last - 1) do
            fields[#fields + 1] = c
            if valued then
                fields[#fields + 1] = ''
            end
        end
        f(fields)
    end
end

local n, m = tonumber(ARGV[8]), tonumber(ARGV[9])
-- Window i's record, its marker (nil on a cluster) and its first argument.
local function window(i)
    local at = 4 + (i - 1) * (1 + m)
    return KEYS[at], m == 1 and KEYS[at + 1] or nil, 8 + 3 * i
end
for i = 1, n do
    local record, marker, a = window(i)
    local owner = redis.call('HGET', record, 'owner')
    if owner ~= consumer or redis.call('HGET', record, 'carried')
        or redis.call('HGET', record, 'taken') then
        redis.call('DEL', KEYS[2])
        return {'gone', ARGV[a]}
    end
    if marker then
        local applied = false
        each_slice(tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), false, function(fields)
            for _, v in ipairs(redis.call('HMGET', marker, unpack(fields))) do
                applied = applied or v ~= false
            end
        end)
        if applied then
            redis.call('DEL', KEYS[2])
            return {'gone', ARGV[a]}
        end
    end
end

-- The first write: one the ACL might refuse fails the script before any
-- mark (a script's writes are not undone by a later error).
redis.call('PERSIST', KEYS[2])
for i = 1, n do
    local record, marker, a = window(i)
    redis.call('HSET', record, 'carried', ARGV[5])
    local first, last = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    if marker and last > first then
        each_slice(first, last, true, function(fields)
            redis.call('HSET', marker, unpack(fields))
        end)
        redis.call('EXPIRE', marker, ttl)
    end
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], 'owner', consumer, 'epoch', '', 'created', now_ms,
    'ids', '', 'chunk', ARGV[6], 'chunks', ARGV[7])
if ARGV[10] ~= '' then
    redis.call('HSET', KEYS[2], 'group', ARGV[10])
end
redis.call('ZADD', KEYS[1], now_ms, ARGV[5])
return {'ok', ARGV[5]}
