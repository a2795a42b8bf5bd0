-- Append the hits of one request to one stream shard, each hit that
-- carries an id at most once within the de-duplication horizon.
--
-- KEYS[1] the shard's stream   KEYS[2..] the keys of the ids in this call
-- ARGV[1] the horizon in seconds (the ids' TTL)
-- ARGV[2..] pairs: the index in KEYS of the hit's id key (0: no id), then
--           the hit's MessagePack event
--
-- An id's key is set (NX, with the horizon as TTL) in the same call that
-- appends its hit, so a request resent after a lost reply, or an id given
-- twice in one request, appends the hit once. Every key shares the
-- stream's hash slot, so this works on a Redis Cluster.
-- Returns the hits appended (the others were seen before).

local appended = 0
for i = 2, #ARGV, 2 do
    local k = tonumber(ARGV[i])
    if k == 0 or redis.call('SET', KEYS[k], '1', 'NX', 'EX', ARGV[1]) then
        redis.call('XADD', KEYS[1], '*', 'hit', ARGV[i + 1])
        appended = appended + 1
    end
end
return appended
