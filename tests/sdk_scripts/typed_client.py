"""Drives `firstgate serve` with dify-client-python (typed pydantic models),
unchanged: every reply and event goes through the SDK's own models.

    typed_client.py SCENARIO BASE_URL KEY

prints one JSON line with what the scenario saw."""

import json
import sys
import time

from dify_client import models
from dify_client._clientx import Client

scenario, base, key = sys.argv[1:4]
client = Client(api_key=key, api_base=base + "/v1")
USER = "typed-user"


def kinds(events):
    return [type(e).__name__ + ":" + str(e.event) for e in events]


def workflow_blocking():
    reply = client.run_workflows(
        models.WorkflowsRunRequest(
            inputs={"topic": "a red fox"}, response_mode=models.ResponseMode.BLOCKING, user=USER
        )
    )
    assert isinstance(reply, models.WorkflowsRunResponse)
    return {
        "status": str(reply.data.status),
        "outputs": reply.data.outputs,
        "task_id": reply.task_id,
    }


def workflow_streaming():
    events = list(
        client.run_workflows(
            models.WorkflowsRunRequest(
                inputs={"topic": "a blue whale"},
                response_mode=models.ResponseMode.STREAMING,
                user=USER,
            )
        )
    )
    text = "".join(e.data.text for e in events if isinstance(e, models.TextChunkStreamResponse))
    # The SDK's union leaves `data` a dict (pydantic's smart mode prefers the exact
    # type): each payload is checked against the SDK's model for its event.
    shapes = {
        models.StreamEvent.WORKFLOW_STARTED: models.WorkflowStartedData,
        models.StreamEvent.NODE_STARTED: models.NodeStartedData,
        models.StreamEvent.NODE_FINISHED: models.NodeFinishedData,
        models.StreamEvent.WORKFLOW_FINISHED: models.WorkflowFinishedData,
    }
    typed = [shapes[e.event].model_validate(e.data) for e in events if e.event in shapes]
    finished = typed[-1]
    assert isinstance(finished, models.WorkflowFinishedData)
    return {
        "kinds": kinds(events),
        "text": text,
        "status": str(finished.status),
        "typed": len(typed),
    }


def chat_turns():
    # The typed blocking reply (ChatResponse) keeps no conversation_id, so the
    # conversation starts with a streamed turn (message_end carries it).
    conversation = ""
    answers = []
    for turn in range(3):
        mode = models.ResponseMode.BLOCKING if turn == 1 else models.ResponseMode.STREAMING
        request = models.ChatRequest(
            query="[count] how many?",
            inputs={},
            response_mode=mode,
            user=USER,
            conversation_id=conversation,
        )
        reply = client.chat_messages(request)
        if mode == models.ResponseMode.BLOCKING:
            assert isinstance(reply, models.ChatResponse)
            assert reply.metadata.usage.total_tokens > 0 and reply.mode == "advanced-chat"
            answers.append(reply.answer)
        else:
            events = list(reply)
            end = [e for e in events if isinstance(e, models.MessageEndStreamResponse)][-1]
            assert end.metadata is not None and end.created_at > 0
            answers.append(
                "".join(e.answer for e in events if isinstance(e, models.MessageStreamResponse))
            )
            assert conversation in ("", end.conversation_id), (end.conversation_id, conversation)
            conversation = end.conversation_id
    return {"answers": answers, "conversation_id": conversation}


def chat_stop():
    request = models.ChatRequest(
        query="[slow] take your time",
        inputs={},
        response_mode=models.ResponseMode.STREAMING,
        user=USER,
    )
    events = []
    stop_sent = None
    for event in client.chat_messages(request):
        events.append(event)
        if stop_sent is None and isinstance(event, models.MessageStreamResponse):
            stop_sent = time.monotonic()
            reply = client.stop_chat_messages(event.task_id, models.StopRequest(user=USER))
            assert reply.result == "success"
    ended = time.monotonic()
    tail = [str(e.event) for e in events[-3:]]
    statuses = [
        models.WorkflowFinishedData.model_validate(e.data).status
        for e in events
        if e.event == models.StreamEvent.WORKFLOW_FINISHED
    ]
    return {"tail": tail, "stop_to_end_s": ended - stop_sent, "status": [str(s) for s in statuses]}


def workflow_stop():
    request = models.WorkflowsRunRequest(
        inputs={"topic": "[slow] a long story"},
        response_mode=models.ResponseMode.STREAMING,
        user=USER,
    )
    events = []
    stop_sent = None
    for event in client.run_workflows(request):
        events.append(event)
        if stop_sent is None and isinstance(event, models.TextChunkStreamResponse):
            stop_sent = time.monotonic()
            assert (
                client.stop_workflows(event.task_id, models.StopRequest(user=USER)).result
                == "success"
            )
    ended = time.monotonic()
    finished = models.WorkflowFinishedData.model_validate(
        [e for e in events if e.event == models.StreamEvent.WORKFLOW_FINISHED][-1].data
    )
    return {
        "tail": [str(e.event) for e in events[-2:]],
        "stop_to_end_s": ended - stop_sent,
        "status": str(finished.status),
        "workflow_run_id": finished.id,
    }


def upload_and_run():
    upload = client.upload_files(
        ("notes.txt", b"remember the milk\n", "text/plain"), models.UploadFileRequest(user=USER)
    )
    assert isinstance(upload, models.UploadFileResponse)
    reply = client.run_workflows(
        models.WorkflowsRunRequest(
            inputs={
                "topic": "files",
                "doc": {
                    "type": "document",
                    "transfer_method": "local_file",
                    "upload_file_id": upload.id,
                },
            },
            response_mode=models.ResponseMode.BLOCKING,
            user=USER,
        )
    )
    return {
        "upload": upload.model_dump(),
        "status": str(reply.data.status),
        "outputs": reply.data.outputs,
    }


def bad_key():
    try:
        Client(api_key="wrong-key-xxxxxxxx", api_base=base + "/v1").run_workflows(
            models.WorkflowsRunRequest(
                inputs={}, response_mode=models.ResponseMode.BLOCKING, user=USER
            )
        )
    except Exception as exc:  # the SDK's own error class for Dify's error body
        return {"error": type(exc).__name__, "status": exc.status, "code": exc.code}
    return {"error": None}


def _refused(call):
    try:
        call()
    except Exception as exc:  # the SDK's own error class for Dify's error body
        return {"status": exc.status, "code": exc.code}
    return None


def feedback_suggested():
    reply = client.chat_messages(
        models.ChatRequest(
            query="rate this", inputs={}, response_mode=models.ResponseMode.BLOCKING, user=USER
        )
    )
    feedback = client.feedback_messages(
        reply.message_id, models.FeedbackRequest(rating=models.Rating.LIKE, user=USER)
    )
    assert isinstance(feedback, models.FeedbackResponse)
    return {
        "feedback": feedback.result,
        "suggested": _refused(
            lambda: client.suggest_messages(reply.message_id, models.ChatSuggestRequest(user=USER))
        ),
        "text_to_audio": _refused(
            lambda: client.text_to_audio(models.TextToAudioRequest(text="hello", user=USER))
        ),
    }


def audio_to_text():
    return _refused(
        lambda: client.audio_to_text(
            ("a.mp3", b"ID3" + bytes(32), "audio/mpeg"), models.AudioToTextRequest(user=USER)
        )
    )


def agent_chat():
    request = models.ChatRequest(
        query="What time is it, and the files?",
        inputs={},
        response_mode=models.ResponseMode.STREAMING,
        user=USER,
    )
    events = list(client.chat_messages(request))
    thoughts = [e for e in events if isinstance(e, models.AgentThoughtStreamResponse)]
    files = [e for e in events if isinstance(e, models.MessageFileStreamResponse)]
    answer = "".join(e.answer for e in events if isinstance(e, models.AgentMessageStreamResponse))
    blocking = models.ChatRequest(
        query="again", inputs={}, response_mode=models.ResponseMode.BLOCKING, user=USER
    )
    return {
        "kinds": [str(e.event) for e in events],
        "answer": answer,
        "thoughts": [(t.position, t.tool, bool(t.observation), t.message_files) for t in thoughts],
        "files": [(f.type, f.belongs_to) for f in files],
        "blocking": _refused(lambda: client.chat_messages(blocking)),
    }


def easy_chat():
    inputs = {"name": "Ada", "season": "winter"}
    request = models.ChatRequest(
        query="Which mug survives the dishwasher?",
        inputs=inputs,
        response_mode=models.ResponseMode.STREAMING,
        user=USER,
    )
    events = list(client.chat_messages(request))
    blocking = models.ChatRequest(
        query="Which mug survives the dishwasher?",
        inputs=inputs,
        response_mode=models.ResponseMode.BLOCKING,
        user=USER,
    )
    reply = client.chat_messages(blocking)
    assert isinstance(reply, models.ChatResponse)
    return {
        "kinds": [type(e).__name__ for e in events],
        "chunks": sum(1 for e in events if type(e) is models.MessageStreamResponse),
        "answer": "".join(e.answer for e in events if type(e) is models.MessageStreamResponse),
        "blocking_mode": reply.mode,
    }


def agent_suggested():
    request = models.ChatRequest(
        query="What time is it?", inputs={}, response_mode=models.ResponseMode.STREAMING, user=USER
    )
    end = [e for e in client.chat_messages(request) if e.event == models.StreamEvent.MESSAGE_END]
    reply = client.suggest_messages(end[-1].message_id, models.ChatSuggestRequest(user=USER))
    assert isinstance(reply, models.ChatSuggestResponse) and reply.result == "success"
    return reply.data


def completion():
    request = models.CompletionRequest(
        inputs={"product": "blue mug", "words": 20},
        response_mode=models.ResponseMode.BLOCKING,
        user=USER,
    )
    reply = client.completion_messages(request)
    assert isinstance(reply, models.CompletionResponse)
    streaming = models.CompletionRequest(
        inputs={"product": "[slow] mug"}, response_mode=models.ResponseMode.STREAMING, user=USER
    )
    events = []
    for event in client.completion_messages(streaming):
        events.append(event)
        if len(events) == 1:
            stop = client.stop_completion_messages(event.task_id, models.StopRequest(user=USER))
            assert stop.result == "success"
    return {
        "answer": reply.answer,
        "tokens": reply.metadata.usage.total_tokens,
        "streamed": [str(e.event) for e in events][-1],
        "chunks": len(events),
    }


print(json.dumps(globals()[scenario](), default=str))
