-- Append the hits of one request to one stream shard, each hit that
-- carries an id at most once within the de-duplication horizon.
--
-- KEYS[1] the shard's stream   KEYS[2..] the keys of the ids in this call
-- ARGV[1] the horizon in seconds (the ids' TTL)
-- ARGV[2..] triples: the index in KEYS of the hit's id key (0: no id), the
--           index of the key an earlier version kept a page's id under (0:
--           none), then the hit's MessagePack event
--
-- An id's key is set (with the horizon as TTL) in the same call that
-- appends its hit, so a request resent after a lost reply, or an id given
-- twice in one request, appends the hit once. The key holds the hit's
-- fingerprint (the first 16 hex digits of the SHA-1 of its event): an id
-- seen again with another hit is not appended either, but is reported, so
-- that an id reused for a different hit is not dropped without a word. (A
-- key holding '1' was set before fingerprints were kept: its duplicates
-- are not compared.) A page's id (a key of its own) met in an earlier
-- version's key holding '1' (that version kept pages' ids with the
-- servers') is a duplicate too, so that a hit resent across an upgrade
-- counts once. Every key shares the stream's hash slot, so this works on
-- a Redis Cluster.
-- Returns {the hits appended, {the positions in this call, from 1, of the
-- hits whose id was seen with another hit}}.

local appended, conflicts = 0, {}
for i = 2, #ARGV, 3 do
    local k, earlier, event = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2]
    local new = k == 0
    if not new then
        local print = string.sub(redis.sha1hex(event), 1, 16)
        local seen = redis.call('GET', KEYS[k])
        if not seen and earlier > 0 and redis.call('GET', KEYS[earlier]) == '1' then
            seen = '1'
        end
        if not seen then
            redis.call('SET', KEYS[k], print, 'EX', ARGV[1])
            new = true
        elseif seen ~= print and seen ~= '1' then
            conflicts[#conflicts + 1] = (i + 1) / 3
        end
    end
    if new then
        redis.call('XADD', KEYS[1], '*', 'hit', event)
        appended = appended + 1
    end
end
return {appended, conflicts}
