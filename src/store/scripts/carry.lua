-- Record the summed cells (counts and statistics) of several windows as a
-- window of their own (the carry), taking those cells out of the windows
-- it sums, in one atomic step next to the stream. Every key here shares the stream's slot.
--
-- KEYS[1] windows (ZSET)   KEYS[2] record of the carry   KEYS[3] this
--         consumer name's registration (see register.lua)
-- then per window i (i = 1..n): its record
-- ARGV[1] consumer  ARGV[2] this worker's registration token
-- ARGV[3] registration lifetime, ms
-- ARGV[4] carry id  ARGV[5] cells per chunk  ARGV[6] n
-- ARGV[7] the group it is applied with on a cluster ('' when none: see
--         apply.lua), recorded as its field `group`
-- then (from ARGV[8]) per window: its id
--
-- The carry's cells (MessagePack, megabytes) are not an argument: a large
-- argument costs a script milliseconds (6 ms for 5 MB, against 0.3 ms for
-- a plain HSET). The worker writes them first into the record, alone and
-- with a TTL (`pieces` = k and the cells in k fields `cells`, `cells:1`
-- ... `cells:k-1`; `stats_pieces` = s and the statistics cells in s fields
-- `stats`, `stats:1` ...; PEXPIRE: not yet a record, nothing lists it); this
-- script makes that hash the record (owner, ids, chunk; no TTL) and lists
-- it, or deletes it when a window is gone (another refusal leaves it to
-- its TTL).
--
-- Each window was committed by this consumer and not applied (every
-- chunk waits); its entries are still pending. The carry marks the window
-- as carried, so that whoever finishes it, this worker after a resync or
-- another one recovering it, applies none of its cells: whoever finishes a
-- window takes it first (take.lua), which refuses a carried one, so each
-- cell goes in through its window or through the carry, never both. The
-- windows' applied markers are not touched: on a cluster they are in
-- other slots, and on one Redis marking each chunk of 60-odd windows of a
-- 1 M-entry drain held Redis 5-10 ms. It refuses, writing nothing, when a
-- window is gone or not this consumer's, already carried, or taken by a
-- worker finishing it: {'gone', window}; the worker then resyncs, and the
-- windows are finished one by one as recorded.
-- Returns {'ok'|'dup'|'taken'|'gone', detail}.

local consumer, token, lifetime = ARGV[1], ARGV[2], ARGV[3]
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
    return {'dup', ARGV[4]}
end
local pieces = tonumber(redis.call('HGET', KEYS[2], 'pieces'))
local stats = tonumber(redis.call('HGET', KEYS[2], 'stats_pieces'))
if not pieces or not stats or redis.call('HLEN', KEYS[2]) ~= pieces + stats + 2 then
    return redis.error_reply('ERR the carry ' .. ARGV[4] .. ' has no cells written')
end

local n = tonumber(ARGV[6])
for i = 1, n do
    local record = KEYS[3 + i]
    local owner = redis.call('HGET', record, 'owner')
    if owner ~= consumer or redis.call('HGET', record, 'carried')
        or redis.call('HGET', record, 'taken') then
        redis.call('DEL', KEYS[2])
        return {'gone', ARGV[7 + i]}
    end
end

-- The first write: one the ACL might refuse fails the script before any
-- mark (a script's writes are not undone by a later error).
redis.call('PERSIST', KEYS[2])
for i = 1, n do
    redis.call('HSET', KEYS[3 + i], 'carried', ARGV[4])
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], 'owner', consumer, 'epoch', '', 'created', now_ms,
    'ids', '', 'chunk', ARGV[5])
if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[2], 'group', ARGV[7])
end
redis.call('ZADD', KEYS[1], now_ms, ARGV[4])
return {'ok', ARGV[4]}
