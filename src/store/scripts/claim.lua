-- Claim entries that other consumers left pending too long, fencing them.
--
-- KEYS[1] stream  KEYS[2] epochs  KEYS[3] dead-letter stream  KEYS[4] last errors
-- ARGV[1] group   ARGV[2] this consumer   ARGV[3] min idle ms   ARGV[4] max entries
-- ARGV[5] max deliveries   ARGV[6] dead MAXLEN
-- KEYS[5] windows (ZSET of recorded windows)   ARGV[7] prefix of a window's record key
--
-- Entries of a consumer that has a recorded, unfinished window are left alone:
-- that window may hold them (committed, not yet acknowledged). Recovery
-- finishes such a window first (acknowledging its entries); what is still
-- pending afterwards was never counted and can be claimed.
-- Every consumer that loses entries gets its epoch bumped in the same atomic
-- step, so a stalled owner can no longer commit a window holding them.
-- An entry already delivered max-deliveries times is dead-lettered with its
-- delivery count and its owner's last error, and acknowledged.
-- Returns {claimed entries as XCLAIM returns them, number dead-lettered}.

local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
local busy = {}
for _, w in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local owner = redis.call('HGET', ARGV[7] .. w, 'owner')
    if owner then
        busy[owner] = true
    end
end
local pending = redis.call('XPENDING', stream, group, 'IDLE', ARGV[3], '-', '+', ARGV[4])
local take, owners, poisoned = {}, {}, 0
for _, p in ipairs(pending) do
    local id, owner, deliveries = p[1], p[2], tonumber(p[4])
    if owner ~= me and not busy[owner] then
        owners[owner] = true
        if deliveries >= tonumber(ARGV[5]) then
            local entry = redis.call('XRANGE', stream, id, id)
            local args = {'MAXLEN', '~', ARGV[6], '*', 'reason', 'max_deliveries', 'id', id,
                'deliveries', deliveries, 'consumer', owner,
                'error', redis.call('HGET', KEYS[4], owner) or 'worker stopped without an error'}
            if entry[1] then
                for _, v in ipairs(entry[1][2]) do
                    args[#args + 1] = v
                end
            end
            redis.call('XADD', KEYS[3], unpack(args))
            redis.call('XACK', stream, group, id)
            poisoned = poisoned + 1
        else
            take[#take + 1] = id
        end
    end
end
for owner in pairs(owners) do
    redis.call('HINCRBY', KEYS[2], owner, 1)
end
local claimed = {}
if #take > 0 then
    claimed = redis.call('XCLAIM', stream, group, me, ARGV[3], unpack(take))
end
return {claimed, poisoned}
