"""The Lua scripts of the Redis room store (app/rooms/redisstore.py), one per change.

Each runs atomically in Redis, so the limits (rooms, owners, members, an address's seats) and
the order of sequence numbers hold across server processes. Every script's ARGV starts with
the key prefix, the idle TTL and the unjoined TTL; a room's TTL on each use is the long one once
an attendee has joined, the short one before. The scripts build the keys of owned rooms from the
prefix, so they need one Redis, not a cluster.
"""

# The TTL a room gets on each use: long once an attendee has joined, short before.
TTL = """
local function ttl(room)
  if redis.call('HEXISTS', room, 'joined') == 1 then return tonumber(ARGV[2]) end
  return tonumber(ARGV[3])
end
"""

# KEYS: rooms, room, ended, owner(client), owner(address)
# ARGV: prefix, idle ttl, unjoined ttl, code, digest, now, max rooms, per client, per address
CREATE = (
    TTL
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[6])
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[7]) then return -1 end
local function owned(key)
  local n = 0
  for _, c in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    if redis.call('EXISTS', ARGV[1] .. 'room:' .. c) == 1 then n = n + 1
    else redis.call('ZREM', key, c) end
  end
  return n
end
if #KEYS > 3 then
  if owned(KEYS[4]) >= tonumber(ARGV[8]) then return -2 end
  if owned(KEYS[5]) >= tonumber(ARGV[9]) then return -3 end
end
redis.call('HSET', KEYS[2], 'token', ARGV[5], 'seq', 0)
local t = ttl(KEYS[2])
redis.call('EXPIRE', KEYS[2], t)
redis.call('ZADD', KEYS[1], tonumber(ARGV[6]) + t, ARGV[4])
for i = 4, #KEYS do
  redis.call('ZADD', KEYS[i], ARGV[6], ARGV[4])
  redis.call('EXPIRE', KEYS[i], ARGV[2])
end
return 1
"""
)

# KEYS: room, members, rooms
# ARGV: prefix, idle ttl, unjoined ttl, code, member, now, member expiry, limit, per address,
#       driver extra, the member's address prefix
JOIN = (
    TTL
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[6])
local total = redis.call('ZCARD', KEYS[2])
if string.sub(ARGV[5], 1, 2) == 'd.' then
  if total >= tonumber(ARGV[8]) + tonumber(ARGV[10]) then return -1 end
else
  if total >= tonumber(ARGV[8]) then return -1 end
  local same, n = 0, #ARGV[11]
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if string.sub(m, 1, n) == ARGV[11] then same = same + 1 end
  end
  if same >= tonumber(ARGV[9]) then return -3 end
  redis.call('HSET', KEYS[1], 'joined', 1)
end
redis.call('ZADD', KEYS[2], ARGV[7], ARGV[5])
local t = ttl(KEYS[1])
redis.call('EXPIRE', KEYS[1], t)
redis.call('EXPIRE', KEYS[2], t)
redis.call('ZADD', KEYS[3], tonumber(ARGV[6]) + t, ARGV[4])
return redis.call('ZCARD', KEYS[2])
"""
)

# KEYS: room, rooms
# ARGV: prefix, idle ttl, unjoined ttl, code, origin, state, now, channel, base or ''
PUBLISH = (
    TTL
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
if ARGV[9] ~= '' then
  local now = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
  if tonumber(ARGV[9]) < now and redis.call('HGET', KEYS[1], 'origin') ~= ARGV[5] then
    return {0, now}
  end
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'state', ARGV[6], 'origin', ARGV[5])
local t = ttl(KEYS[1])
redis.call('EXPIRE', KEYS[1], t)
redis.call('ZADD', KEYS[2], tonumber(ARGV[7]) + t, ARGV[4])
redis.call('PUBLISH', ARGV[8], ARGV[4] .. ' ' .. seq .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
return {1, seq}
"""
)

# KEYS: room, members, rooms, ended
# ARGV: prefix, idle ttl, unjoined ttl, code, digest, channel
DELETE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[5] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('SET', KEYS[4], 1, 'EX', ARGV[2])
redis.call('PUBLISH', ARGV[6], ARGV[4])
return 1
"""

# KEYS: room, members, rooms, ended
# ARGV: prefix, idle ttl, unjoined ttl, code, digest, seq, state or '', has state, now,
#       member expiry, members...
RESTORE = """
if redis.call('EXISTS', KEYS[4]) == 1 then return {-1} end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'token') ~= ARGV[5] then return {-2} end
  if tonumber(redis.call('HGET', KEYS[1], 'seq') or '0') < tonumber(ARGV[6]) then
    redis.call('HSET', KEYS[1], 'seq', ARGV[6])
    redis.call('HDEL', KEYS[1], 'origin')
    if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'state', ARGV[7])
    else redis.call('HDEL', KEYS[1], 'state') end
  end
else
  redis.call('HSET', KEYS[1], 'token', ARGV[5], 'seq', ARGV[6], 'joined', 1)
  if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'state', ARGV[7]) end
end
redis.call('HSET', KEYS[1], 'joined', 1)
for i = 11, #ARGV do redis.call('ZADD', KEYS[2], ARGV[10], ARGV[i]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], tonumber(ARGV[9]) + tonumber(ARGV[2]), ARGV[4])
local state = redis.call('HGET', KEYS[1], 'state')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[9])
return {1, tonumber(redis.call('HGET', KEYS[1], 'seq')), state, redis.call('ZCARD', KEYS[2])}
"""

# KEYS: (room, members) per room, then rooms
# ARGV: prefix, idle ttl, unjoined ttl, now, member expiry, then per room: code, n, n members
HEARTBEAT = (
    TTL
    + """
local missing, k, i = {}, 1, 6
while i <= #ARGV do
  local code, n = ARGV[i], tonumber(ARGV[i + 1])
  local room, members = KEYS[k], KEYS[k + 1]
  if redis.call('EXISTS', room) == 0 then
    table.insert(missing, code)
  else
    for j = 1, n do redis.call('ZADD', members, 'XX', ARGV[5], ARGV[i + 1 + j]) end
    local t = ttl(room)
    redis.call('EXPIRE', room, t)
    redis.call('EXPIRE', members, t)
    redis.call('ZADD', KEYS[#KEYS], 'XX', tonumber(ARGV[4]) + t, code)
  end
  i, k = i + 2 + n, k + 2
end
return missing
"""
)
