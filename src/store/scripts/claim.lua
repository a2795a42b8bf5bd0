-- Claim entries that other consumers left pending too long, fencing them.
--
-- KEYS[1] stream  KEYS[2] epochs  KEYS[3] dead-letter stream  KEYS[4] last errors
-- ARGV[1] group   ARGV[2] this consumer   ARGV[3] min idle ms   ARGV[4] max entries
-- ARGV[5] max deliveries   ARGV[6] dead MAXLEN
-- KEYS[5] windows (ZSET of recorded windows)   ARGV[7] prefix of a window's record key
-- ARGV[8] most bytes to claim: no entry is claimed once those claimed take
--         this many (ids, field names and values; the first is always
--         claimed), so a claim of large entries brings a worker a few at a time
-- ARGV[9] most bytes of an entry's fields a dead letter keeps (the cut marked
--         with fields `truncated` and `original_bytes`)
--
-- Entries of a consumer that has a recorded, unfinished window are left alone:
-- that window may hold them (committed, not yet acknowledged). Recovery
-- finishes such a window first (acknowledging its entries); what is still
-- pending afterwards was never counted and can be claimed.
-- Every consumer that loses entries gets its epoch bumped in the same atomic
-- step, so a stalled owner can no longer commit a window holding them.
-- An entry already delivered max-deliveries times is dead-lettered with its
-- delivery count and its owner's last error, and acknowledged.
-- Returns {claimed entries as XCLAIM returns them (an entry deleted from
-- the stream as [id, nil]), number dead-lettered,
-- 1 when the byte bound stopped it before the idle entries it found, else 0}.
--
-- Bounded work whatever the pending lists hold (a worker behind keeps up to
-- millions of entries pending while it sums them; a filtered XPENDING IDLE
-- walks a whole list when nothing in it is idle, ~10 ms a million): this
-- consumer's own list is never looked at, and of each other consumer's list
-- only the oldest ARGV[4] entries, and only when its oldest is idle. A
-- consumer that dies or stalls keeps every entry it holds, each delivered
-- before it stopped, so all of them, its oldest among them, are idle within
-- the claim time of its stop: nothing is left behind. (Only an entry idle
-- while an older-id one of the same consumer is not, which a claim makes,
-- waits until that one is idle too: at most the claim time.)

local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
local idle, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local summary = redis.call('XPENDING', stream, group)
if summary[1] == 0 then
    return {{}, 0}
end
local busy = {}
for _, w in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local owner = redis.call('HGET', ARGV[7] .. w, 'owner')
    if owner then
        busy[owner] = true
    end
end
-- Each entry as XPENDING's extended form gives it: {id, owner, idle ms, deliveries}.
local pending = {}
for _, c in ipairs(summary[4]) do
    local owner = c[1]
    local room = limit - #pending
    if room > 0 and owner ~= me and not busy[owner] then
        local oldest = redis.call('XPENDING', stream, group, '-', '+', 1, owner)[1]
        if oldest and oldest[3] >= idle then
            for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', room, owner)) do
                if p[3] >= idle then
                    pending[#pending + 1] = p
                end
            end
        end
    end
end
-- The fields of a dead letter: the first `room` bytes of the entry's, then
-- the marks of the cut if there was one.
local function kept(args, fields, room)
    local total = 0
    for _, v in ipairs(fields) do
        total = total + #v
    end
    for _, v in ipairs(fields) do
        args[#args + 1] = string.sub(v, 1, room)
        room = math.max(room - #v, 0)
    end
    if total > tonumber(ARGV[9]) then
        args[#args + 1] = 'truncated'
        args[#args + 1] = '1'
        args[#args + 1] = 'original_bytes'
        args[#args + 1] = total
    end
end

local budget = tonumber(ARGV[8]) or math.huge
local claimed, owners, poisoned, bytes, more = {}, {}, 0, 0, 0
for _, p in ipairs(pending) do
    if bytes >= budget then
        more = 1
        break
    end
    local id, owner, deliveries = p[1], p[2], tonumber(p[4])
    owners[owner] = true
    if deliveries >= tonumber(ARGV[5]) then
        local entry = redis.call('XRANGE', stream, id, id)
        local args = {'MAXLEN', '~', ARGV[6], '*', 'reason', 'max_deliveries', 'id', id,
            'deliveries', deliveries, 'consumer', owner,
            'error', redis.call('HGET', KEYS[4], owner) or 'worker stopped without an error'}
        if entry[1] then
            kept(args, entry[1][2], tonumber(ARGV[9]))
        end
        redis.call('XADD', KEYS[3], unpack(args))
        redis.call('XACK', stream, group, id)
        poisoned = poisoned + 1
    else
        -- One at a time, to stop at the byte bound; the same work for Redis
        -- as one XCLAIM of them all.
        local got = redis.call('XCLAIM', stream, group, me, ARGV[3], id)[1]
        if got then
            claimed[#claimed + 1] = got
            bytes = bytes + #got[1]
            for _, v in ipairs(got[2] or {}) do
                bytes = bytes + #v
            end
        elseif not redis.call('XRANGE', stream, id, id)[1] then
            -- Deleted from the stream while pending (Redis 7 drops it from
            -- the PEL without a word): returned without fields, so that the
            -- claimer reports it lost.
            claimed[#claimed + 1] = {id, false}
        end
    end
end
for owner in pairs(owners) do
    redis.call('HINCRBY', KEYS[2], owner, 1)
end
return {claimed, poisoned, more}
