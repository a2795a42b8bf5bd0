-- Record the summed count cells of several windows as a window of their
-- own (the carry), taking those cells out of the windows it sums, in one
-- atomic step next to the stream. Every key here shares the stream's slot
-- (used on one Redis only: on a cluster windows are applied whole).
--
-- KEYS[1] windows (ZSET)   KEYS[2] record of the carry   KEYS[3] this
--         consumer name's registration (see register.lua)
-- KEYS[2+2i], KEYS[3+2i] (i = 1..n) record and applied marker of window i
-- ARGV[1] consumer  ARGV[2] this worker's registration token
-- ARGV[3] registration lifetime, ms   ARGV[4] marker TTL, seconds
-- ARGV[5] carry id  ARGV[6] cells per chunk  ARGV[7] chunk count
-- ARGV[8] n, then per window: its id, the first and the last + 1 of its
--         chunks whose cells the carry holds
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
-- pending. The carry marks those chunks
-- applied in the window's marker (so that whoever finishes the window,
-- this worker or another one recovering it, never applies them) and the
-- window as carried. It refuses, writing nothing, when a window is gone
-- or not this consumer's, already carried, or has one of those chunks
-- applied (another worker is finishing it): {'gone', window}; the worker
-- then resyncs, and the windows are finished one by one as recorded.
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

local n = tonumber(ARGV[8])
for i = 1, n do
    local record, marker, a = KEYS[2 + 2 * i], KEYS[3 + 2 * i], 6 + 3 * i
    local owner = redis.call('HGET', record, 'owner')
    if owner ~= consumer or redis.call('HGET', record, 'carried') then
        redis.call('DEL', KEYS[2])
        return {'gone', ARGV[a]}
    end
    for c = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]) - 1 do
        if redis.call('HGET', marker, c) then
            redis.call('DEL', KEYS[2])
            return {'gone', ARGV[a]}
        end
    end
end

-- The first write: one the ACL might refuse fails the script before any
-- mark (a script's writes are not undone by a later error).
redis.call('PERSIST', KEYS[2])
for i = 1, n do
    local record, marker, a = KEYS[2 + 2 * i], KEYS[3 + 2 * i], 6 + 3 * i
    redis.call('HSET', record, 'carried', ARGV[5])
    local first, last = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    for c = first, last - 1 do
        redis.call('HSET', marker, c, '')
    end
    if last > first then
        redis.call('EXPIRE', marker, ttl)
    end
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], 'owner', consumer, 'epoch', '', 'created', now_ms,
    'ids', '', 'chunk', ARGV[6], 'chunks', ARGV[7])
redis.call('ZADD', KEYS[1], now_ms, ARGV[5])
return {'ok', ARGV[5]}
