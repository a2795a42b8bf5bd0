-- The one atomic step next to the stream: finish the previous window and
-- commit the next one. Every key here shares the stream's Cluster slot.
--
-- KEYS[1] stream            KEYS[2] epochs (HASH consumer -> epoch)
-- KEYS[3] windows (ZSET)    KEYS[4] dead-letter stream
-- KEYS[5] record of the window to finish (a placeholder when none)
-- KEYS[6] record of the window to commit (a placeholder when none)
-- KEYS[7] this consumer name's registration (see register.lua)
-- ARGV[1] consumer  ARGV[2] its epoch as the worker knows it  ARGV[3] dead MAXLEN
-- ARGV[4] this worker's registration token  ARGV[5] registration lifetime, ms
-- ARGV[6] id of the window to finish, or ''
-- ARGV[7] F, then F failures of that window's apply step, 6 values each:
--         error, precision, name, bucket, count, window id
-- then:   id of the window to commit, or ''; cells per chunk;
--         D, then D rejected entries: id, reason, N, then N field/value pairs
--
-- The window's ids (space separated), cells (MessagePack) and statistics
-- cells (MessagePack; absent when none) are not arguments: a megabyte of
-- arguments cost this script 1.5 ms on top of writing them, and up to
-- 13 ms in a 1 M-entry drain. The worker writes them first into the
-- record, alone and with a TTL (fields `ids`, `cells`, `stats`; PEXPIRE:
-- not yet a record, nothing lists it, and no `owner`); this script makes
-- that hash the record (owner, epoch, created, chunk; no TTL) and lists
-- it, or deletes it when it refuses the window.
--
-- Finishing dead-letters the apply failures and deletes the record, only if
-- the record still exists, so a replay never dead-letters twice. Committing
-- fails with {'fenced', epoch} when another worker claimed entries from this
-- consumer since it read its epoch: the window is then dropped unapplied.
-- It fails with {'taken', holder} when another live worker registered this
-- consumer name (two processes under one name would read each other's
-- pending entries); a lapsed registration is taken back.
-- Returns {'ok'|'dup'|'fenced'|'taken'|'none', epoch or holder}.

local consumer, epoch, maxlen = ARGV[1], ARGV[2], ARGV[3]
local token, lifetime = ARGV[4], ARGV[5]
local a = 6

local finish = ARGV[a]
local nfail = tonumber(ARGV[a + 1])
-- Nothing is written before the dead-letter stream is known to be one (a
-- missing key is one too): a key of another type there would fail this
-- script halfway, the window committed and its dead letters lost.
local window_at = a + 2 + nfail * 6
if nfail > 0 or ARGV[window_at] ~= '' and tonumber(ARGV[window_at + 2]) > 0 then
    redis.call('XLEN', KEYS[4])
end
a = a + 2
if finish ~= '' and redis.call('EXISTS', KEYS[5]) == 1 then
    for i = 0, nfail - 1 do
        local f = a + i * 6
        redis.call('XADD', KEYS[4], 'MAXLEN', '~', maxlen, '*',
            'reason', 'apply_error', 'error', ARGV[f], 'precision', ARGV[f + 1],
            'name', ARGV[f + 2], 'bucket', ARGV[f + 3], 'count', ARGV[f + 4],
            'window', ARGV[f + 5])
    end
    redis.call('DEL', KEYS[5])
    redis.call('ZREM', KEYS[3], finish)
end
a = a + nfail * 6

local window = ARGV[a]
if window == '' then
    return {'none', epoch}
end
-- A record already (a resend after a lost reply wrote its fields again,
-- and their TTL): keep it.
if redis.call('HGET', KEYS[6], 'owner') then
    redis.call('PERSIST', KEYS[6])
    return {'dup', epoch}
end
local current = redis.call('HGET', KEYS[2], consumer) or '0'
if current ~= epoch then
    redis.call('DEL', KEYS[6])
    return {'fenced', current}
end
local holder = redis.call('GET', KEYS[7])
if holder ~= token then
    if holder then
        redis.call('DEL', KEYS[6])
        return {'taken', holder}
    end
    redis.call('SET', KEYS[7], token, 'PX', lifetime)
end
-- ids and cells at least (HLEN, not HGET: the cells are a megabyte).
if redis.call('HLEN', KEYS[6]) < 2 then
    return redis.error_reply('ERR the window ' .. window .. ' has no cells written')
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('PERSIST', KEYS[6])
redis.call('HSET', KEYS[6], 'owner', consumer, 'epoch', epoch,
    'created', now_ms, 'chunk', ARGV[a + 1])
redis.call('ZADD', KEYS[3], now_ms, window)

a = a + 2
local ndead = tonumber(ARGV[a])
a = a + 1
for _ = 1, ndead do
    local args = {'MAXLEN', '~', maxlen, '*', 'reason', ARGV[a + 1], 'id', ARGV[a]}
    local nfields = tonumber(ARGV[a + 2])
    for j = 1, nfields * 2 do
        args[#args + 1] = ARGV[a + 2 + j]
    end
    redis.call('XADD', KEYS[4], unpack(args))
    a = a + 3 + nfields * 2
end
return {'ok', epoch}
